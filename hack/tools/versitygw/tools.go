//go:build tools

// Package tools pins the Versity S3 Gateway (versitygw, Apache-2.0), the real S3 server the
// backup tests store objects in (its posix backend: buckets are directories, objects files).
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
