package v1_test

import (
	_ "crypto/sha256" // the digest algorithms the kubelet's reference parser knows
	_ "crypto/sha512"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
	"github.com/stretchr/testify/assert"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/backup"
)

// TestReferencesNeverNameWhatTheOperatorOwns: no Secret reference of a RedisCluster (or of a
// RedisBackup of it) names a Secret the operator owns for it, an application user never gets
// the default user's password, and a backup is never written to one of the cluster's data
// claims; references that merely look alike stay accepted.
func TestReferencesNeverNameWhatTheOperatorOwns(t *testing.T) {
	owns := []string{cachev1.AuthConfSecretSuffix, cachev1.PreviousPasswordSecretSuffix, cachev1.OperatorSecretSuffix}
	var cases []admissionCase
	for _, suffix := range owns {
		secret := "example" + suffix
		cases = append(cases,
			admissionCase{"spec.auth at " + secret, "replicas: 3\nauth: {secretRef: {name: " + secret + "}}", "spec.auth.secretRef.name is one of the Secrets the operator owns"},
			admissionCase{"a user's password at " + secret, "replicas: 3\nusers: [{name: app, passwordSecretRef: {name: " + secret + "}, rules: +get}]", "spec.users[].passwordSecretRef.name is one of the Secrets the operator owns"},
			admissionCase{"TLS at " + secret, "replicas: 3\ntls: {secretName: " + secret + "}", "spec.tls.secretName is one of the Secrets the operator owns"},
			admissionCase{"S3 credentials at " + secret, "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {bucket: backups, credentialsSecret: " + secret + "}}}", "spec.backup.destination.s3 names one of the Secrets the operator owns"},
			admissionCase{"an S3 CA at " + secret, "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {bucket: backups, credentialsSecret: s3, caBundle: {name: " + secret + "}}}}", "spec.backup.destination.s3 names one of the Secrets the operator owns"},
		)
	}
	cases = append(cases,
		admissionCase{"a user with the generated password", "replicas: 3\nusers: [{name: app, passwordSecretRef: {name: example-auth}, rules: +get}]", "spec.users[].passwordSecretRef.name is one of the Secrets the operator owns"},
		admissionCase{"a user with spec.auth's password", "replicas: 3\nauth: {secretRef: {name: shared, key: pw}}\nusers: [{name: app, passwordSecretRef: {name: shared, key: pw}, rules: +get}]", "the password of the default user"},
		admissionCase{"a user with spec.auth's password, by the default key", "replicas: 3\nauth: {secretRef: {name: shared}}\nusers: [{name: app, passwordSecretRef: {name: shared, key: password}, rules: +get}]", "the password of the default user"},
		admissionCase{"a user with another key of spec.auth's Secret", "replicas: 3\nauth: {secretRef: {name: shared, key: pw}}\nusers: [{name: app, passwordSecretRef: {name: shared, key: app}, rules: +get}]", ""},
		admissionCase{"spec.auth at the generated password's name", "replicas: 3\nauth: {secretRef: {name: example-auth}}", ""},
		admissionCase{"another cluster's operator Secret", "replicas: 3\nauth: {secretRef: {name: other-operator}}", ""},
		admissionCase{"a backup on a data claim", "replicas: 3\nbackup: {schedule: '@daily', destination: {persistentVolumeClaim: {claimName: data-example-1}}}", "is one of the data claims of this RedisCluster"},
		admissionCase{"a backup on a shard's data claim", "replicas: 3\ncluster: {shards: 3}\nbackup: {schedule: '@daily', destination: {persistentVolumeClaim: {claimName: data-example-shard2-0}}}", "is one of the data claims of this RedisCluster"},
		admissionCase{"a backup on another cluster's data claim", "replicas: 3\nbackup: {schedule: '@daily', destination: {persistentVolumeClaim: {claimName: data-other-0}}}", ""},
		admissionCase{"a backup on a claim named like data", "replicas: 3\nbackup: {schedule: '@daily', destination: {persistentVolumeClaim: {claimName: data-example-backups}}}", ""},
		admissionCase{"a Secret key no Secret can have", "replicas: 3\nauth: {secretRef: {name: pw, key: ..}}", "spec.auth.secretRef.key"},
	)
	runCases(t, "RedisCluster", cases)

	backupOf := func(dest string) string {
		return "apiVersion: cache.example.com/v1\nkind: RedisBackup\nspec: {cluster: sessions, destination: " + dest + "}"
	}
	runCases(t, "RedisBackup", []admissionCase{
		{"credentials of the cluster's operator", backupOf("{s3: {bucket: backups, credentialsSecret: sessions-operator}}"), "spec.destination.s3 names one of the Secrets the operator owns"},
		{"a CA in the cluster's auth configuration", backupOf("{s3: {bucket: backups, credentialsSecret: s3, caBundle: {name: sessions-auth-conf}}}"), "spec.destination.s3 names one of the Secrets the operator owns"},
		{"the cluster's data claim", backupOf("{persistentVolumeClaim: {claimName: data-sessions-0}}"), "is one of the data claims of spec.cluster"},
		{"a claim of its own", backupOf("{persistentVolumeClaim: {claimName: backups}}"), ""},
	})
	t.Run("a RedisBackup name too long for its pods", func(t *testing.T) {
		requireRefused(t, object(t, "RedisBackup", strings.Repeat("b", 244), backupOf("{persistentVolumeClaim: {claimName: backups}}")), "at most 243 characters")
		requireAccepted(t, object(t, "RedisBackup", strings.Repeat("b", 243), backupOf("{persistentVolumeClaim: {claimName: backups}}")))
	})
}

// TestImagesAreWhatTheKubeletPulls is a differential test of spec.image against the reference
// parser the kubelet uses (github.com/distribution/reference's ParseNormalizedNamed): the API
// takes exactly the references it takes.
func TestImagesAreWhatTheKubeletPulls(t *testing.T) {
	digest := strings.Repeat("a1", 32)
	images := []string{
		"redis", "redis:7.2", "library/redis:7.2.4", "docker.io/library/redis:7.2", "mirror.example.com/redis:7.2",
		"mirror.example.com:5000/team/redis:7.2", "localhost/redis", "localhost:5000/redis:7", "registry:5000/redis",
		"[::1]:5000/redis:7", "Mirror.Example.com/redis:7.2", "redis@sha256:" + digest, "redis:7.2@sha256:" + digest,
		"redis@sha512:" + strings.Repeat("ab", 64), "redis@sha384:" + strings.Repeat("ab", 48), "a_b/c__d/e-f---g.h:tag_1.x-y",
		strings.Repeat("a", 255), strings.Repeat("a", 120) + "/" + strings.Repeat("b", 134),
		// refused
		"Redis:7.2", "team/Redis", "Registry/redis", "redis:", "redis:7.2:7.3", "redis@sha256:abc", "redis@sha256:" + strings.ToUpper(digest),
		"redis@md5:" + digest, "redis:" + strings.Repeat("t", 129), "redis:-7", "redis:.7", "redis/", "/redis", "redis//x", "re..dis",
		"redis_", "_redis", "redis.-x", "a/" + strings.Repeat("a", 254), digest + digest, strings.Repeat("a", 64)[:64],
		"redis@sha256:" + digest + "x", "mirror.example.com:port/redis", "redis:7.2@", "-redis", "redis..x:1", "UPPER:5000/redis", "Mirror/redis:7", strings.Repeat("a", 237), strings.Repeat("a", 238),
		"a/" + strings.Repeat("b", 243), "a/" + strings.Repeat("b", 244), "x.io/" + strings.Repeat("b", 250), "x.io/" + strings.Repeat("b", 251),
		// the path's length as the kubelet counts it: without the registry, library/ on a
		// one-component Docker Hub name
		strings.Repeat("a", 247), strings.Repeat("a", 248), "docker.io/" + strings.Repeat("a", 247), "docker.io/" + strings.Repeat("a", 248),
		"index.docker.io/" + strings.Repeat("a", 248), "docker.io/a/" + strings.Repeat("b", 253), "docker.io/a/" + strings.Repeat("b", 254),
		"localhost/" + strings.Repeat("a", 255), "localhost/" + strings.Repeat("a", 256), "x.io/" + strings.Repeat("b", 255) + ":7",
		"x.io/" + strings.Repeat("b", 256), "X/" + strings.Repeat("b", 255), "a/" + strings.Repeat("b", 253) + "@sha256:" + digest,
	}
	// The one known exception: spec.image's first pattern, older than this test, has no
	// brackets, so an IPv6 registry is refused (a changed pattern is a CRD change OLM v1
	// refuses).
	ipv6Registry := "[::1]:5000/redis:7"
	for _, image := range images {
		t.Run(image[:min(len(image), 60)], func(t *testing.T) {
			_, parseErr := reference.ParseNormalizedNamed(image)
			api := admit(object(t, "RedisCluster", "example", fmt.Sprintf("replicas: 3\nimage: %q", image)))
			if image == ipv6Registry {
				assert.NoError(t, parseErr)
				assert.Error(t, api, "the known exception is one no more: take it out")
				return
			}
			if parseErr == nil {
				assert.NoError(t, api, "the kubelet pulls %q", image)
			} else {
				assert.Error(t, api, "the kubelet refuses %q: %v", image, parseErr)
			}
		})
	}
}

// TestSchedulesThatNeverFireAreRefused is a differential test against the scheduler the
// operator runs: for days of the month and months combined, the API takes a schedule exactly
// when the scheduler finds a time within five years to fire it.
func TestSchedulesThatNeverFireAreRefused(t *testing.T) {
	for _, days := range []string{"1", "28", "29", "30", "31", "30,31", "29,31", "31,31", "1-31", "30-31", "31-31", "29-31", "*/30"} {
		for _, months := range []string{"2", "02", "feb", "FEB", "4", "apr", "2,4", "4,6,9,11", "jun,sep,nov", "1", "2,3", "12", "*", "2-3"} {
			for _, weekdays := range []string{"*", "?", "mon"} {
				schedule := fmt.Sprintf("0 3 %s %s %s", days, months, weekdays)
				t.Run(schedule, func(t *testing.T) {
					sched, err := backup.ParseSchedule(schedule)
					if err != nil {
						t.Skipf("the scheduler refuses it: %v", err) // a grammar case, tested elsewhere
					}
					fires := !sched.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero()
					spec := fmt.Sprintf("replicas: 3\nbackup: {schedule: %q, destination: {persistentVolumeClaim: {claimName: b}}}", schedule)
					if fires {
						requireAccepted(t, object(t, "RedisCluster", "example", spec))
					} else {
						requireRefused(t, object(t, "RedisCluster", "example", spec), "spec.backup.schedule never fires")
					}
				})
			}
		}
	}
}

// TestRelationsBetweenFields: a setting that cannot work with the rest of the spec is refused,
// naming both fields.
func TestRelationsBetweenFields(t *testing.T) {
	runCases(t, "RedisCluster", []admissionCase{
		{"fsync without an append-only file", "replicas: 3\nconfig: {appendfsync: always}", "spec.config.appendfsync tunes the append-only file, which a RedisCluster keeps only with spec.storage"},
		{"fsync with storage", "replicas: 3\nstorage: {size: 1Gi}\nconfig: {appendfsync: always}", ""},
		{"AOF rewrites without storage", "replicas: 3\nconfig: {auto-aof-rewrite-percentage: '50'}", "with spec.storage"},
		{"snapshots without storage", "replicas: 3\nconfig: {save: '3600 1'}", ""},
		{"databases in cluster mode", "replicas: 2\ncluster: {shards: 3}\nconfig: {databases: '4'}", "spec.config.databases is not read in cluster mode (spec.cluster)"},
		{"databases with one primary", "replicas: 2\nconfig: {databases: '4'}", ""},
		{"the replication failover timeout in cluster mode", "replicas: 2\ncluster: {shards: 3}\nfailover: {unreachableTimeout: 3s}", "spec.failover.unreachableTimeout is not read in cluster mode"},
		{"write safety in cluster mode", "replicas: 2\ncluster: {shards: 3}\nfailover: {minReplicasToWrite: 1}", ""},
		{"an endpoint on port 0", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {endpoint: 'http://10.0.0.1:0', bucket: backups, credentialsSecret: s3}}}", "a port is 1 to 65535"},
		{"an endpoint past the last port", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {endpoint: 'https://s3.example.com:65536/', bucket: backups, credentialsSecret: s3}}}", "a port is 1 to 65535"},
		{"an endpoint on the last port", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {endpoint: 'https://s3.example.com:65535/', bucket: backups, credentialsSecret: s3}}}", ""},
		{"an IPv4 address that does not exist", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {endpoint: 'http://10.0.0.256:9000', bucket: backups, credentialsSecret: s3}}}", "an IPv4 address"},
		{"an IPv4 address with a leading zero", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {endpoint: 'http://10.0.0.01', bucket: backups, credentialsSecret: s3}}}", "an IPv4 address"},
		{"an IPv4 address", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {endpoint: 'http://10.0.0.255:9000', bucket: backups, credentialsSecret: s3}}}", ""},
		{"an IPv6 address with a port", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {endpoint: 'http://[fd00::1]:9000', bucket: backups, credentialsSecret: s3}}}", ""},
	})
}
