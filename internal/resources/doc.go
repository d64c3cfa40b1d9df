// Package resources holds the pure builders of a RedisCluster's children: functions that take
// the RedisCluster and return the server-side apply configuration of the StatefulSet, the
// Services and the ConfigMap that the controller applies. No client, no I/O.
package resources
