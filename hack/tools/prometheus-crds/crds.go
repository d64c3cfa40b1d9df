// Package crds pins the Prometheus Operator's API types, from which `make prometheus-crds`
// generates its ServiceMonitor and PrometheusRule CRDs with controller-gen, as that project
// generates them: the tests install them to check our monitoring objects against the real
// schemas, with no download of its release manifests.
package crds

import _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
