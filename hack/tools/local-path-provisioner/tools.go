//go:build tools

// Package tools pins Rancher's local-path-provisioner, the dynamic volume provisioner of the
// local cluster's default StorageClass: a claim gets a directory on the node its pod was
// scheduled to, and a PersistentVolume bound to that node (as on machines with local disks).
package tools

import _ "github.com/rancher/local-path-provisioner"
