package v1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// The admission tests send specs to a real kube-apiserver with the CRDs of config/crd, as a
// server-side dry run: the API server runs every schema and CEL rule and stores nothing.

var (
	k8sClient client.Client
	namespace = "default"
)

func TestMain(m *testing.M) {
	env, cfg, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8sClient, err = client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	code := 0
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

// object builds an object of kind from YAML: its spec, or the whole object when it has a kind.
func object(t *testing.T, kind, name, doc string) *unstructured.Unstructured {
	t.Helper()
	content := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &content), "the test's YAML")
	if _, whole := content["kind"]; !whole {
		content = map[string]any{"apiVersion": cachev1.GroupVersion.String(), "kind": kind, "spec": content}
	}
	obj := &unstructured.Unstructured{Object: content}
	obj.SetNamespace(namespace)
	if name != "" {
		obj.SetName(name)
	}
	return obj
}

// admit sends obj as a server-side dry run: nil when the API server would store it.
func admit(obj *unstructured.Unstructured) error {
	return k8sClient.Create(context.Background(), obj, client.DryRunAll)
}

func requireAccepted(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	require.NoError(t, admit(obj))
}

// requireRefused checks that the API server refuses obj as invalid, with a message holding want
// (the field and what it takes).
func requireRefused(t *testing.T, obj *unstructured.Unstructured, want string) {
	t.Helper()
	err := admit(obj)
	require.Error(t, err, "accepted")
	assert.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
	assert.Contains(t, err.Error(), want)
}

type admissionCase struct {
	name string
	spec string
	// want is empty for a spec the API accepts, else a part of the refusal's message.
	want string
}

func runCases(t *testing.T, kind string, cases []admissionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, kind, "example", tc.spec)
			if tc.want == "" {
				requireAccepted(t, obj)
			} else {
				requireRefused(t, obj, tc.want)
			}
		})
	}
}

// everyField is a realistic RedisCluster that sets every documented field of the one-primary
// mode.
const everyField = `
replicas: 3
version: "7.2.4"
image: mirror.example.com/library/redis:7.2.4
config:
  maxmemory: 256mb
  maxmemory-policy: allkeys-lru
  save: "3600 1 300 100"
  appendfsync: always
  timeout: "300"
  tcp-keepalive: "60"
  lazyfree-lazy-eviction: "yes"
  io-threads: "2"
  notify-keyspace-events: Ex
  slowlog-log-slower-than: "10000"
  hash-max-listpack-entries: "256"
  activedefrag: "no"
  client-output-buffer-limit: "pubsub 64mb 16mb 60"
resources:
  requests: {cpu: 250m, memory: 512Mi}
  limits: {cpu: "1", memory: 1Gi, ephemeral-storage: 2Gi}
storage: {size: 10Gi, storageClassName: fast-ssd, whenDeleted: Delete, whenScaled: Retain}
auth: {secretRef: {name: my-redis, key: password}, previousPasswordValidFor: 10m}
users:
- name: app
  passwordSecretRef: {name: app-password}
  rules: "~app:* &app:* +@read +@write -@dangerous"
- name: reports
  passwordSecretRef: {name: reports-password, key: pw}
  rules: "%R~* +@read +config|get (~temp:* +set)"
tls: {secretName: sessions-tls, clientAuth: true}
failover: {unreachableTimeout: 3s, minReplicasToWrite: 1, maxReplicaLag: 1m30s}
backup:
  schedule: "0 3 * * mon-fri"
  destination:
    s3:
      endpoint: https://s3.eu-west-1.amazonaws.com:443
      bucket: redis-backups.prod
      prefix: prod/sessions
      region: eu-west-1
      credentialsSecret: s3-credentials
      caBundle: {name: s3-ca, key: ca.crt}
  retention: {count: 7, maxAge: 720h}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: redis, effect: NoSchedule}]
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
expose:
  type: LoadBalancer
  annotations: {metallb.universe.tf/address-pool: redis}
  loadBalancerSourceRanges: [203.0.113.0/24, "2001:db8::/32"]
`

// everyClusterField sets what cluster mode takes.
const everyClusterField = `
replicas: 2
cluster: {shards: 5, nodeTimeout: 15s}
config: {cluster-require-full-coverage: "no", cluster-allow-reads-when-down: "yes", maxmemory: 1gb}
storage: {size: 1Gi}
expose: {type: NodePort}
`

func TestValidSpecsAreAccepted(t *testing.T) {
	runCases(t, "RedisCluster", []admissionCase{
		{name: "every field", spec: everyField},
		{name: "every cluster-mode field", spec: everyClusterField},
		{name: "the least", spec: "replicas: 1"},
		{name: "a restore", spec: "replicas: 1\nrestore: {fromBackup: sessions-20261201-030000}"},
		{name: "a volume destination in cluster mode", spec: "replicas: 2\ncluster: {shards: 3}\nbackup: {schedule: '@daily', destination: {persistentVolumeClaim: {claimName: backups}}}"},
		{name: "a volume destination", spec: "replicas: 1\nbackup: {schedule: '@every 6h', destination: {persistentVolumeClaim: {claimName: backups, prefix: a/b}}}"},
		{name: "durations as Go writes them", spec: "replicas: 2\nauth: {secretRef: {name: pw}, previousPasswordValidFor: 0s}\nfailover: {unreachableTimeout: 1.5s, minReplicasToWrite: 1, maxReplicaLag: 1h0m0s}"},
		{name: "the default storage class spelled out", spec: "replicas: 1\nstorage: {size: 1Gi, storageClassName: ''}"},
	})
}

// TestShippedExamplesAreAccepted: the samples, the CSV's alm-examples and the README's
// complete examples still pass.
func TestShippedExamplesAreAccepted(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	var docs []string
	samples, err := filepath.Glob(filepath.Join(root, "config", "samples", "cache_v1_*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, samples)
	for _, f := range samples {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		docs = append(docs, string(raw))
	}
	csvs, err := filepath.Glob(filepath.Join(root, "bundle", "manifests", "*.clusterserviceversion.yaml"))
	require.NoError(t, err)
	require.Len(t, csvs, 1)
	raw, err := os.ReadFile(csvs[0])
	require.NoError(t, err)
	csv := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal(raw, &csv.Object))
	var examples []map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(csv.GetAnnotations()["alm-examples"]), &examples))
	require.NotEmpty(t, examples)
	for _, e := range examples {
		out, err := yaml.Marshal(e)
		require.NoError(t, err)
		docs = append(docs, string(out))
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(text), -1) {
			if strings.Contains(block[1], "kind: ") {
				docs = append(docs, block[1])
			}
		}
	}
	for i, doc := range docs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			obj := object(t, "", "", doc)
			require.NotEmpty(t, obj.GetKind(), doc)
			requireAccepted(t, obj)
		})
	}
}

func TestInvalidRedisClustersAreRefused(t *testing.T) {
	runCases(t, "RedisCluster", []admissionCase{
		{"zero replicas", "replicas: 0", "spec.replicas"},
		{"negative replicas", "replicas: -1", "spec.replicas"},
		{"too many replicas", "replicas: 101", "spec.replicas"},
		{"missing replicas", "version: '7.2'", "spec.replicas"},
		{"shell in version", "replicas: 3\nversion: 'latest; rm -rf /'", "spec.version"},
		{"tag as version", "replicas: 3\nversion: latest", "spec.version"},
		{"Redis 5", "replicas: 3\nversion: '5.0'", "spec.version"},
		{"image with spaces", "replicas: 3\nimage: redis:7.2 --evil", "spec.image"},
		{"storage without a size", "replicas: 3\nstorage: {}", "spec.storage.size"},
		{"unknown retention", "replicas: 3\nstorage: {size: 1Gi, whenDeleted: Archive}", "spec.storage.whenDeleted"},
		{"password Secret without a name", "replicas: 3\nauth: {secretRef: {key: pw}}", "spec.auth.secretRef.name"},
		{"a password Secret name no Secret can have", "replicas: 3\nauth: {secretRef: {name: .}}", "spec.auth.secretRef.name"},
		{"a password key no Secret can have", "replicas: 3\nauth: {secretRef: {name: my-redis, key: a key}}", "spec.auth.secretRef.key"},
		{"the default user in spec.users", "replicas: 3\nusers: [{name: default, passwordSecretRef: {name: pw}, rules: +get}]", "the default user's password is spec.auth's"},
		{"as many replicas to write as nodes", "replicas: 3\nfailover: {minReplicasToWrite: 3}", "spec.failover.minReplicasToWrite must be less than spec.replicas"},
		{"negative replicas to write", "replicas: 3\nfailover: {minReplicasToWrite: -1}", "spec.failover.minReplicasToWrite"},
		{"a backup destination with both S3 and a claim", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {bucket: backups, credentialsSecret: s3}, persistentVolumeClaim: {claimName: backups}}}", "a backup destination is one of s3 or persistentVolumeClaim"},
		{"a backup destination with neither", "replicas: 3\nbackup: {schedule: '@daily', destination: {}}", "a backup destination is one of s3 or persistentVolumeClaim"},
		{"cluster mode with two shards", "replicas: 3\ncluster: {shards: 2}", "spec.cluster.shards"},
		{"an external Service of type ClusterIP", "replicas: 3\nexpose: {type: ClusterIP}", "spec.expose.type"},
		{"an external Service without a type", "replicas: 3\nexpose: {annotations: {a: b}}", "spec.expose.type"},
		{"source ranges on a NodePort", "replicas: 3\nexpose: {type: NodePort, loadBalancerSourceRanges: [10.0.0.0/8]}", "spec.expose.loadBalancerSourceRanges needs spec.expose.type LoadBalancer"},
		{"a source range that is no CIDR", "replicas: 3\nexpose: {type: LoadBalancer, loadBalancerSourceRanges: [10.0.0.0/8, 10.0.0.300/24]}", "10.0.0.300/24 is not one"},
		{"a source range without its prefix length", "replicas: 3\nexpose: {type: LoadBalancer, loadBalancerSourceRanges: [192.0.2.1]}", "192.0.2.1 is not one"},
	})
	t.Run("a name too long for its Services", func(t *testing.T) {
		requireRefused(t, object(t, "RedisCluster", strings.Repeat("a", 53), "replicas: 3"), "metadata.name")
	})
	t.Run("a name starting with a digit", func(t *testing.T) {
		requireRefused(t, object(t, "RedisCluster", "1sessions", "replicas: 3"), "metadata.name")
	})
	t.Run("cluster mode with a name too long for its shards", func(t *testing.T) {
		requireRefused(t, object(t, "RedisCluster", strings.Repeat("a", 45), "replicas: 3\ncluster: {shards: 3}"), "at most 44 characters in cluster mode")
	})
}

// configSpec is a RedisCluster setting one directive, in cluster mode for the cluster-* ones.
func configSpec(key, value string) string {
	spec := fmt.Sprintf("replicas: 3\nconfig: {%q: %q}", key, value)
	if strings.HasPrefix(key, "cluster-") {
		spec += "\ncluster: {shards: 3}"
	}
	if i := slices.IndexFunc(cachev1.ConfigDirectives, func(d cachev1.ConfigDirective) bool { return d.Name == key }); i >= 0 && cachev1.ConfigDirectives[i].NeedsStorage {
		spec += "\nstorage: {size: 1Gi}"
	}
	return spec
}

// TestConfigDirectivesTakeTheirGrammar tries every directive of the allow-list with its example
// (accepted) and its counter-example (refused, naming the directive).
func TestConfigDirectivesTakeTheirGrammar(t *testing.T) {
	var cases []admissionCase
	for _, d := range cachev1.ConfigDirectives {
		cases = append(cases,
			admissionCase{d.Name + " " + d.Example, configSpec(d.Name, d.Example), ""},
			admissionCase{d.Name + " " + d.Bad, configSpec(d.Name, d.Bad), "spec.config." + d.Name + " is "})
	}
	runCases(t, "RedisCluster", cases)
}

func TestConfigOutsideTheAllowListIsRefused(t *testing.T) {
	const notExposed = "is not a setting this operator exposes"
	runCases(t, "RedisCluster", []admissionCase{
		// Issue 22: the directive that defines ACL users was accepted.
		{"a user directive", configSpec("user", "evil on nopass ~* +@all"), "spec.config.user is not set in spec.config: set spec.users"},
		{"a setting the operator manages", configSpec("replicaof", "10.1.1.1 6379"), "spec.config.replicaof " + notExposed},
		{"an old alias of a managed setting", configSpec("slaveof", "10.1.1.1 6379"), "spec.config.slaveof " + notExposed},
		{"an alias of the announced address", configSpec("slave-announce-ip", "10.1.1.1"), "spec.config.slave-announce-ip " + notExposed},
		{"the cluster bus port", configSpec("cluster-port", "16380"), "spec.config.cluster-port " + notExposed},
		{"the cluster's announced address", configSpec("cluster-announce-ip", "10.1.1.1"), "spec.config.cluster-announce-ip " + notExposed},
		{"the cluster's announced bus port", configSpec("cluster-announce-bus-port", "1"), "spec.config.cluster-announce-bus-port " + notExposed},
		{"the ACL pub/sub default", configSpec("acl-pubsub-default", "allchannels"), "spec.config.acl-pubsub-default " + notExposed},
		{"the data file's name", configSpec("dbfilename", "../../etc/passwd"), "spec.config.dbfilename " + notExposed},
		{"a module loaded into Redis", configSpec("loadmodule", "/tmp/evil.so"), "spec.config.loadmodule is refused"},
		{"the DEBUG command opened", configSpec("enable-debug-command", "yes"), "spec.config.enable-debug-command is refused"},
		{"the MODULE command opened", configSpec("enable-module-command", "yes"), "spec.config.enable-module-command is refused"},
		{"protected configs opened", configSpec("enable-protected-configs", "yes"), "spec.config.enable-protected-configs is refused"},
		{"write safety set in the config", configSpec("min-replicas-to-write", "3"), "spec.config.min-replicas-to-write is not set in spec.config: set spec.failover.minReplicasToWrite"},
		{"write safety by its old name", configSpec("min-slaves-max-lag", "1"), "set spec.failover.maxReplicaLag"},
		{"the append-only file, which follows storage", configSpec("appendonly", "no"), "set spec.storage"},
		{"the cluster's node timeout", configSpec("cluster-node-timeout", "100"), "set spec.cluster.nodeTimeout"},
		{"a cluster setting without cluster mode", "replicas: 3\nconfig: {cluster-require-full-coverage: 'no'}", "spec.config.cluster-require-full-coverage is a cluster-mode setting"},
		{"two names of one setting", "replicas: 3\nconfig: {hash-max-listpack-entries: '1', hash-max-ziplist-entries: '2'}", "two names of one setting"},
		{"a setting that is not a directive", configSpec("Max Memory", "1gb"), "spec.config.Max Memory " + notExposed},
		{"a value that adds a line", configSpec("maxmemory", "1gb\nrequirepass x"), "spec.config.maxmemory"},
		{"an integer out of Redis's range", configSpec("hz", "501"), "spec.config.hz is an integer from 1 to 500"},
		{"an integer too long to read", configSpec("timeout", "99999999999999999999"), "spec.config.timeout is an integer"},
		{"an enum's unknown value", configSpec("maxmemory-policy", "allkeys-random "), "spec.config.maxmemory-policy is one of"},
		{"a size in words", configSpec("maxmemory", "a lot"), "spec.config.maxmemory is 0 (no limit) or a size in bytes"},
	})
}

// TestUserRulesAreOneGrammar: the API server and the operator's tokeniser accept the same
// rules, and split an accepted one into the arguments Redis is given.
func TestUserRulesAreOneGrammar(t *testing.T) {
	accepted := []struct {
		rules string
		args  []string
	}{
		{"", nil},
		{"~app:* +@read", []string{"~app:*", "+@read"}},
		{"%R~cache:* %W~queue:* %RW~x &events:* allchannels resetkeys", []string{"%R~cache:*", "%W~queue:*", "%RW~x", "&events:*", "allchannels", "resetkeys"}},
		{"+config|get -@dangerous +select|0 nocommands allcommands resetchannels", []string{"+config|get", "-@dangerous", "+select|0", "nocommands", "allcommands", "resetchannels"}},
		{"~a\\* ~{user}:[a-z]? ~x(y)", []string{"~a\\*", "~{user}:[a-z]?", "~x(y)"}},
		{"+get (~temp:* +set) clearselectors (+ping)", []string{"+get", "(~temp:* +set)", "clearselectors", "(+ping)"}},
	}
	for _, tc := range accepted {
		t.Run(tc.rules, func(t *testing.T) {
			requireAccepted(t, object(t, "RedisCluster", "example", userSpec(tc.rules)))
			args, err := cachev1.SplitUserRules(tc.rules)
			require.NoError(t, err)
			assert.Equal(t, tc.args, args)
		})
	}
	refused := map[string]string{
		// Issue 22: a tab made "nopass" a token of its own, a user anyone could log in as.
		"a tab before nopass":                "~app:*\tnopass +@all",
		"a newline before a password":        "~app:*\n>hunter2",
		"a non-breaking space before a hash": "~app:*\u00a0#" + strings.Repeat("a", 64),
		"two spaces":                         "~app:*  +get",
		"a leading space":                    " ~app:*",
		"a trailing space":                   "~app:* ",
		"a password in clear":                "~app:* +get >hunter2",
		"nopass":                             "nopass allkeys allcommands",
		"a password hash":                    "#" + strings.Repeat("a", 64),
		"on and off":                         "off",
		"reset":                              "reset +@all",
		"a quote in a pattern":               `~app:"*`,
		"a non-ASCII pattern":                "~clé:*",
		"an unclosed selector":               "(~temp:* +set",
		"a selector holding a password":      "(~temp:* >hunter2)",
		"a nested selector":                  "((~temp:*))",
		"an empty command":                   "+",
	}
	for name, rules := range refused {
		t.Run(name, func(t *testing.T) {
			requireRefused(t, object(t, "RedisCluster", "example", userSpec(rules)), "spec.users[0].rules")
			_, err := cachev1.SplitUserRules(rules)
			require.Error(t, err, "the operator's tokeniser takes what the API refuses")
		})
	}
}

func userSpec(rules string) string {
	quoted, _ := json.Marshal(rules)
	return fmt.Sprintf("replicas: 3\nusers: [{name: app, passwordSecretRef: {name: pw}, rules: %s}]", quoted)
}

// TestDurationsAreWhatTheOperatorParses: every duration field takes Go's duration format (what
// the operator decodes with time.ParseDuration) within its bounds, and nothing else.
func TestDurationsAreWhatTheOperatorParses(t *testing.T) {
	fields := []struct {
		path, spec string
		good, bad  []string
	}{
		{"spec.failover.unreachableTimeout", "replicas: 3\nfailover: {unreachableTimeout: %q}", []string{"5s", "500ms", "10m", "1m30s"}, []string{"0s", "-5s", "11m"}},
		{"spec.failover.maxReplicaLag", "replicas: 3\nfailover: {minReplicasToWrite: 1, maxReplicaLag: %q}", []string{"1s", "1h"}, []string{"500ms", "2h"}},
		{"spec.auth.previousPasswordValidFor", "replicas: 3\nauth: {secretRef: {name: pw}, previousPasswordValidFor: %q}", []string{"0s", "0", "168h"}, []string{"169h", "-1s"}},
		{"spec.cluster.nodeTimeout", "replicas: 3\ncluster: {shards: 3, nodeTimeout: %q}", []string{"1s", "10m"}, []string{"100ms", "11m"}},
		{"spec.backup.retention.maxAge", "replicas: 3\nbackup: {schedule: '@daily', destination: {persistentVolumeClaim: {claimName: b}}, retention: {maxAge: %q}}", []string{"1m", "720h", "87600h"}, []string{"59s", "87601h"}},
	}
	// Forms the API server's duration format takes and Go's time.ParseDuration refuses: one of
	// them stored made the operator fail to decode every RedisCluster of its list.
	notGo := []string{"1d", "2w", "P1D", "PT5S", "5 seconds", "1 h", "+5s", "5S", "", "1e3s", "99999999999999999999h"}
	for _, f := range fields {
		for _, v := range f.good {
			t.Run(f.path+" "+v, func(t *testing.T) {
				_, err := time.ParseDuration(v)
				require.NoError(t, err, "a good case Go cannot parse")
				requireAccepted(t, object(t, "RedisCluster", "example", fmt.Sprintf(f.spec, v)))
			})
		}
		for _, v := range append(append([]string{}, f.bad...), notGo...) {
			t.Run(f.path+" "+v, func(t *testing.T) {
				requireRefused(t, object(t, "RedisCluster", "example", fmt.Sprintf(f.spec, v)), f.path)
			})
		}
	}
}

// TestSchedulesAgreeWithTheScheduler: the API's schedule rule and the scheduler the operator
// runs agree, but for the one class the API leaves to the operator (ranges whose start is after
// their end), which the RedisCluster reports at once (Degraded, BackupScheduleInvalid).
func TestSchedulesAgreeWithTheScheduler(t *testing.T) {
	cases := []struct {
		schedule    string
		api, parsed bool
	}{
		{"0 3 * * *", true, true},
		{"*/15 * * * *", true, true},
		{"0 0-23/2 1,15 jan-jun MON-FRI", true, true},
		{"0  3 * * Sun", true, true},
		{"5/10 ? * * ?", true, true},
		{"@hourly", true, true},
		{"@daily", true, true},
		{"@weekly", true, true},
		{"@every 1m", true, true},
		{"@every 6h30m", true, true},
		// Issue 22: a backup every second.
		{"@every 1s", false, false},
		{"@every 59s", false, false},
		{"@every -1h", false, false},
		{"@every 0s", false, false},
		{"@every 1d", false, false},
		{"60 * * * *", false, false},
		{"0 24 * * *", false, false},
		{"0 0 0 * *", false, false},
		{"0 0 32 * *", false, false},
		{"0 0 * 13 *", false, false},
		{"0 0 * * 7", false, false},
		{"*/0 * * * *", false, false},
		{"0 0 * * * *", false, false},
		{"0 0 * *", false, false},
		{"@reboot", false, false},
		{"@secondly", false, false},
		{"CRON_TZ=Europe/Paris 0 3 * * *", false, false},
		{"0\t3 * * *", false, true},
		{"30-10 * * * *", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.schedule, func(t *testing.T) {
			spec := fmt.Sprintf("replicas: 3\nbackup: {schedule: %q, destination: {persistentVolumeClaim: {claimName: b}}}", tc.schedule)
			if tc.api {
				requireAccepted(t, object(t, "RedisCluster", "example", spec))
			} else {
				requireRefused(t, object(t, "RedisCluster", "example", spec), "spec.backup.schedule")
			}
			_, err := backup.ParseSchedule(tc.schedule)
			if tc.parsed {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
			// The API never takes what the operator cannot schedule, but for the one
			// class it leaves to the status condition.
			if tc.api && !tc.parsed {
				assert.Regexp(t, `^[0-9]+-[0-9]+ `, tc.schedule)
			}
		})
	}
}

func TestResourcesAreWhatAPodTakes(t *testing.T) {
	res := func(s string) string { return "replicas: 3\nresources: " + s }
	runCases(t, "RedisCluster", []admissionCase{
		{"requests and limits", res("{requests: {cpu: 100m, memory: 100Mi}, limits: {cpu: 2, memory: 1Gi}}"), ""},
		{"a request equal to its limit", res("{requests: {memory: 1Gi}, limits: {memory: 1Gi}}"), ""},
		{"a negative limit", res("{limits: {memory: -1Gi}}"), "must not be negative"},
		{"a negative request", res("{requests: {cpu: -100m}}"), "must not be negative"},
		{"fractional bytes", res("{limits: {memory: '0.5'}}"), "whole bytes"},
		{"fractional bytes as milli", res("{requests: {memory: 100m}}"), "whole bytes"},
		{"a request above its limit", res("{requests: {memory: 2Gi}, limits: {memory: 1Gi}}"), "a request must not be above its limit"},
		{"an unknown resource", res("{limits: {nvidia.com/gpu: 1}}"), "spec.resources takes cpu, memory and ephemeral-storage"},
		{"a misspelt resource", res("{requests: {memmory: 1Gi}}"), "spec.resources takes cpu, memory and ephemeral-storage"},
		{"a dynamic resource claim", res("{claims: [{name: gpu}]}"), "spec.resources.claims is not supported"},
		{"storage of fractional bytes", "replicas: 3\nstorage: {size: '1.5'}", "spec.storage.size"},
		{"storage of no bytes", "replicas: 3\nstorage: {size: '0'}", "spec.storage.size"},
		{"a storage class no StorageClass can have", "replicas: 3\nstorage: {size: 1Gi, storageClassName: Fast SSD}", "spec.storage.storageClassName"},
	})
}

// A maxmemory at or above the container's memory limit gets Redis killed by the kernel before
// Redis refuses a write or evicts a key: refused, in each of Redis's units.
func TestMaxMemoryIsBelowTheMemoryLimit(t *testing.T) {
	spec := func(maxmemory, limit string) string {
		return "replicas: 3\nconfig: {maxmemory: '" + maxmemory + "'}\nresources: {limits: {memory: " + limit + "}}"
	}
	const refused = "spec.config.maxmemory must be below spec.resources.limits.memory"
	runCases(t, "RedisCluster", []admissionCase{
		{"below the limit", spec("200mb", "256Mi"), ""},
		{"below the limit, in bytes", spec("268435455", "256Mi"), ""},
		{"below the limit, in Redis's thousands", spec("268435k", "256Mi"), ""},
		{"below the limit, upper case", spec("255MB", "256Mi"), ""},
		{"no limit: any maxmemory", "replicas: 3\nconfig: {maxmemory: 64gb}", ""},
		{"equal to the limit", spec("256mb", "256Mi"), refused},
		{"above the limit", spec("1gb", "256Mi"), refused},
		{"above the limit, in bytes", spec("268435457", "256Mi"), refused},
		{"above the limit, in Redis's millions (1m = 1000000)", spec("300m", "256Mi"), refused},
		{"above a limit in decimal units", spec("1G", "512M"), refused},
		{"no limit of its own (0) under a memory limit", spec("0", "256Mi"), refused},
		{"a size Redis cannot read is said so, not compared", spec("a lot", "256Mi"), "spec.config.maxmemory is 0 (no limit) or a size in bytes"},
	})
}

func TestPodPlacementIsWhatAPodTakes(t *testing.T) {
	spread := func(s string) string { return "replicas: 3\ntopologySpreadConstraints: [" + s + "]" }
	runCases(t, "RedisCluster", []admissionCase{
		{"a skew of 0", spread("{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}"), "maxSkew is 1 or more"},
		{"no topology key", spread("{maxSkew: 1, topologyKey: '', whenUnsatisfiable: DoNotSchedule}"), "topologyKey is a label key"},
		{"an unknown unsatisfiable policy", spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Maybe}"), "whenUnsatisfiable is DoNotSchedule or ScheduleAnyway"},
		{"min domains while scheduling anyway", spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2}"), "minDomains is 1 or more, and only with DoNotSchedule"},
		{"an unknown taints policy", spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Sometimes}"), "Honor or Ignore"},
	})
}

func TestBackupReferencesAreNames(t *testing.T) {
	s3 := func(s string) string {
		return "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {credentialsSecret: s3, " + s + "}}}"
	}
	pvc := func(s string) string {
		return "replicas: 3\nbackup: {schedule: '@daily', destination: {persistentVolumeClaim: {" + s + "}}}"
	}
	runCases(t, "RedisCluster", []admissionCase{
		{"an endpoint with a port", s3("endpoint: 'http://seaweedfs.storage.svc:8333', bucket: b-1"), ""},
		{"an endpoint by IPv4 address", s3("endpoint: 'http://10.0.0.1:9000/', bucket: b-1"), ""},
		{"an endpoint by IPv6 address", s3("endpoint: 'https://[fd00::1]:443', bucket: b-1"), ""},
		{"credentials in the endpoint", s3("endpoint: 'https://AKIA:secret@s3.example.com', bucket: b-1"), "spec.backup.destination.s3.endpoint"},
		{"a path in the endpoint", s3("endpoint: 'https://s3.example.com/bucket', bucket: b-1"), "spec.backup.destination.s3.endpoint"},
		{"a query in the endpoint", s3("endpoint: 'https://s3.example.com?x=1', bucket: b-1"), "spec.backup.destination.s3.endpoint"},
		{"an endpoint without a scheme", s3("endpoint: s3.example.com, bucket: b-1"), "spec.backup.destination.s3.endpoint"},
		{"a bucket of two characters", s3("bucket: ab"), "spec.backup.destination.s3.bucket"},
		{"a bucket in capitals", s3("bucket: Backups"), "spec.backup.destination.s3.bucket"},
		{"a bucket with two dots", s3("bucket: a..b"), "no '..'"},
		{"a bucket shaped like an IP address", s3("bucket: 192.168.5.4"), "not shaped like an IP address"},
		{"a bucket name S3 reserves", s3("bucket: xn--abc"), "reserved by S3"},
		{"an S3 prefix that climbs", s3("bucket: b-1, prefix: a/../b"), "no '.' or '..' element"},
		{"an S3 prefix with an empty element", s3("bucket: b-1, prefix: a//b"), "spec.backup.destination.s3.prefix"},
		{"a region with a space", s3("bucket: b-1, region: us east"), "spec.backup.destination.s3.region"},
		{"a credentials Secret no Secret can have", "replicas: 3\nbackup: {schedule: '@daily', destination: {s3: {bucket: b-1, credentialsSecret: S3_Creds}}}", "spec.backup.destination.s3.credentialsSecret"},
		{"a volume prefix that leaves the volume", pvc("claimName: b, prefix: a/../../etc"), "the prefix must stay on the volume"},
		{"a claim no claim can have", pvc("claimName: 'My Backups'"), "spec.backup.destination.persistentVolumeClaim.claimName"},
		{"a restore from no object name", "replicas: 3\nrestore: {fromBackup: 'a/b'}", "spec.restore.fromBackup"},
	})
	dest := "destination: {s3: {bucket: b-1, credentialsSecret: s3}}"
	runCases(t, "RedisBackup", []admissionCase{
		{"a backup", "cluster: sessions\n" + dest, ""},
		{"a backup of another namespace's cluster", "cluster: other/sessions\n" + dest, "spec.cluster"},
		{"a backup of a name no RedisCluster has", "cluster: Sessions\n" + dest, "spec.cluster"},
		{"a backup with credentials in its endpoint", "cluster: sessions\ndestination: {s3: {endpoint: 'https://k:s@h', bucket: b-1, credentialsSecret: s3}}", "spec.destination.s3.endpoint"},
	})
}

// TestConfigExamplesStartRedis starts a real redis-server with every directive's example, so
// that the allow-list holds only directives Redis knows, with values it takes.
func TestConfigExamplesStartRedis(t *testing.T) {
	redisVersion, err := redistest.Version()
	require.NoError(t, err)
	have := semver.MustParse(redisVersion)
	knows := func(d cachev1.ConfigDirective) bool { return d.Since == "" || have.GTE(semver.MustParse(d.Since+".0")) }
	var lines []string
	for _, d := range cachev1.ConfigDirectives {
		if !knows(d) {
			t.Logf("%s: needs Redis %s, this redis-server is %s", d.Name, d.Since, redisVersion)
			continue
		}
		if strings.HasPrefix(d.Name, "cluster-") {
			continue // tried below, with cluster-enabled
		}
		lines = append(lines, d.Name+" "+d.Example)
	}
	requireRedisStarts(t, strings.Join(lines, "\n"))
	var cluster []string
	for _, d := range cachev1.ConfigDirectives {
		if strings.HasPrefix(d.Name, "cluster-") && knows(d) {
			cluster = append(cluster, d.Name+" "+d.Example)
		}
	}
	requireRedisStarts(t, "cluster-enabled yes\n"+strings.Join(cluster, "\n"))
}

func requireRedisStarts(t *testing.T, conf string) {
	t.Helper()
	server, err := redistest.StartIn(t.TempDir(), "config", conf)
	require.NoError(t, err, "redis-server refused:\n%s", conf)
	server.Kill()
}

// TestARuleAddedLaterLetsStoredObjectsBeUpdated: Kubernetes ratchets validation, so a RedisCluster
// stored before a rule existed (here: rules with a tab, before issue 22) can still be updated as
// long as the part that breaks the rule is left as it is; changing that part to another bad value
// is refused. The test stores such an object by taking the rule out of the CRD for a moment.
func TestARuleAddedLaterLetsStoredObjectsBeUpdated(t *testing.T) {
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: "redisclusters.cache.example.com"}, crd))
	original := crd.DeepCopy()
	t.Cleanup(func() {
		// Whatever happened, the CRD is the one of config/crd again.
		current := &unstructured.Unstructured{}
		current.SetGroupVersionKind(crd.GroupVersionKind())
		if k8sClient.Get(ctx, client.ObjectKeyFromObject(crd), current) == nil {
			current.Object["spec"] = original.Object["spec"]
			_ = k8sClient.Update(ctx, current)
		}
	})
	rulesPath := []string{"spec", "versions", "0", "schema", "openAPIV3Schema", "properties", "spec", "properties", "users", "items", "properties", "rules"}
	setRulesValidations := func(validations any) {
		t.Helper()
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		v0 := versions[0].(map[string]any)
		require.NoError(t, unstructured.SetNestedField(v0, validations, rulesPath[3:]...))
		versions[0] = v0
		require.NoError(t, unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"))
		require.NoError(t, k8sClient.Update(ctx, crd))
	}
	bad := object(t, "RedisCluster", "stored-before", userSpec("~app:*\tnopass +@all"))
	versions, _, _ := unstructured.NestedSlice(original.Object, "spec", "versions")
	validations, found, err := unstructured.NestedFieldCopy(versions[0].(map[string]any), append(rulesPath[3:], "x-kubernetes-validations")...)
	require.NoError(t, err)
	require.True(t, found)

	// Given a RedisCluster stored while the rule was not there
	rules, _, _ := unstructured.NestedMap(versions[0].(map[string]any), rulesPath[3:]...)
	delete(rules, "x-kubernetes-validations")
	setRulesValidations(rules)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8sClient.Create(ctx, bad.DeepCopy()))
	}, 20*time.Second, 100*time.Millisecond)
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, bad) })
	rules["x-kubernetes-validations"] = validations
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(crd), crd))
	setRulesValidations(rules)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Error(c, admit(object(t, "RedisCluster", "probe", userSpec("~app:*\tnopass"))), "the rule is back")
	}, 20*time.Second, 100*time.Millisecond)

	// when another field changes, the update is taken
	require.NoError(t, k8sClient.Patch(ctx, bad, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":5}}`))))
	// but the rules may change only to rules of the grammar
	err = k8sClient.Patch(ctx, bad, client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"users":[{"name":"app","passwordSecretRef":{"name":"pw"},"rules":"~app:*\tnopass"}]}}`)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.users[0].rules")
	require.NoError(t, k8sClient.Patch(ctx, bad, client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"users":[{"name":"app","passwordSecretRef":{"name":"pw"},"rules":"~app:* +@read"}]}}`))))
}
