// Package v1 stands in for operator-framework/ansible-operator-plugins v1.42.3's ansible plugin,
// which the module proxy here refuses to serve. The operator-sdk CLI imports it for one thing:
// to offer `operator-sdk init --plugins ansible.sdk.operatorframework.io/v1`, scaffolding for
// Ansible-based operators. redis-operator is a Go project (its PROJECT file names the go/v4
// plugins), and none of the commands it runs (generate kustomize manifests, generate bundle,
// bundle validate, run bundle, run bundle-upgrade, cleanup, scorecard) goes through this plugin.
//
// So the stand-in is the plugin's identity and nothing else: the CLI lists it, and a command
// that would scaffold with it finds no subcommand and says the plugin does not support it.
package v1

import (
	"sigs.k8s.io/kubebuilder/v4/pkg/config"
	cfgv3 "sigs.k8s.io/kubebuilder/v4/pkg/config/v3"
	"sigs.k8s.io/kubebuilder/v4/pkg/plugin"
)

// Plugin is the ansible plugin's identity, as v1.42.3 declares it.
type Plugin struct{}

// Name is the real plugin's name.
func (Plugin) Name() string { return "base.ansible.sdk.operatorframework.io" }

// Version is the real plugin's version.
func (Plugin) Version() plugin.Version { return plugin.Version{Number: 1} }

// SupportedProjectVersions is the real plugin's: project config v3.
func (Plugin) SupportedProjectVersions() []config.Version { return []config.Version{cfgv3.Version} }
