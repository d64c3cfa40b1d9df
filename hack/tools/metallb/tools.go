//go:build tools

// Package tools pins MetalLB's controller and speaker (Apache-2.0), the load balancer users run
// on bare metal: the controller gives each LoadBalancer Service an address from a pool, and a
// speaker answers ARP for it from one node (L2 mode), whose kube-proxy takes the connection on.
// The local cluster runs them as processes beside its nodes' (localcluster.StartMetalLB).
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
