//go:build tools

// Package tools pins SeaweedFS (Apache-2.0), whose S3 gateway the backup tests store objects in.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
