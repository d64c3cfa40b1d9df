//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// specGenerator makes RedisCluster specs from the CRD's OpenAPI schema, seeded: valid and
// invalid values, boundary numbers, odd strings, unicode, huge maps (Acto's idea). It knows
// nothing of our validation rules: it reads the schema and picks values near its edges.
type specGenerator struct {
	r    *rand.Rand
	spec apiextensionsv1.JSONSchemaProps
	// plausible: this spec's values are what a user would write (every other spec), so that
	// the accepted ones are many and the "or converge" half of the check has work to do.
	plausible bool
}

func newSpecGenerator(root string, seed uint64) (*specGenerator, error) {
	raw, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "cache.example.com_redisclusters.yaml"))
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		return nil, err
	}
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	return &specGenerator{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), spec: schema}, nil
}

// next is one spec.
func (g *specGenerator) next() map[string]any {
	g.plausible = g.r.IntN(2) == 0
	return g.object(g.spec, 0)
}

func (g *specGenerator) object(s apiextensionsv1.JSONSchemaProps, depth int) map[string]any {
	out := map[string]any{}
	for _, name := range slices.Sorted(mapKeys(s.Properties)) {
		// Required fields mostly there, optional ones now and then, fewer the deeper.
		want := 0.35 / float64(depth+1)
		if g.plausible {
			want = 0.2 / float64(depth+1)
		}
		if slices.Contains(s.Required, name) {
			want = 0.95
			if g.plausible {
				want = 1
			}
		}
		if g.r.Float64() < want {
			out[name] = g.value(name, s.Properties[name], depth+1)
		}
	}
	return out
}

func (g *specGenerator) value(name string, s apiextensionsv1.JSONSchemaProps, depth int) any {
	switch {
	case s.XIntOrString && g.plausible:
		return g.pick("1Gi", "512Mi", "100m", "2")
	case s.XIntOrString:
		return g.pick("1Gi", "100Mi", "0", "-1", "1.5", "abc", "1e3", 2, -3, "9999999Ti")
	case s.Type == "integer" || s.Type == "number":
		return g.number(s)
	case s.Type == "boolean":
		return g.r.IntN(2) == 0
	case s.Type == "string":
		return g.string(name, s)
	case s.Type == "array":
		if s.Items == nil || s.Items.Schema == nil || depth > 4 {
			return []any{}
		}
		items := make([]any, g.r.IntN(3))
		for i := range items {
			items[i] = g.value(name, *s.Items.Schema, depth+1)
		}
		return items
	case s.Type == "object" && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		return g.stringMap(*s.AdditionalProperties.Schema, depth)
	case s.Type == "object" && depth <= 4:
		return g.object(s, depth)
	}
	return map[string]any{}
}

func (g *specGenerator) number(s apiextensionsv1.JSONSchemaProps) any {
	if g.plausible {
		lo, hi := int64(1), int64(5)
		if s.Minimum != nil {
			lo = max(lo, int64(*s.Minimum))
		}
		if s.Maximum != nil {
			hi = min(hi, int64(*s.Maximum))
		}
		return lo + g.r.Int64N(max(hi-lo, 0)+1)
	}
	candidates := []int64{0, 1, 2, 3, -1, 7, 1 << 31, -(1 << 31), 1<<63 - 1}
	if s.Minimum != nil {
		m := int64(*s.Minimum)
		candidates = append(candidates, m-1, m, m, m+1)
	}
	if s.Maximum != nil {
		m := int64(*s.Maximum)
		candidates = append(candidates, m-1, m, m+1)
	}
	return candidates[g.r.IntN(len(candidates))]
}

func (g *specGenerator) string(name string, s apiextensionsv1.JSONSchemaProps) any {
	if len(s.Enum) > 0 && g.r.IntN(4) > 0 {
		return g.enumValue(s)
	}
	if g.plausible {
		return g.plausibleString(name, s)
	}
	if s.Format == "duration" {
		// Go's forms, and forms the API server's duration format takes but Go does not (issue 22).
		return g.pick("5s", "1s", "0s", "-1s", "100ms", "1h", "2562047h", "abc", "", "1d", "P1D", "PT5S", "1h30m", "90s", "5 seconds", "720h")
	}
	// Fields whose grammar issue 22 made the API check: values users write, good and bad.
	if picks, ok := namedStrings[name]; ok && g.r.IntN(4) > 0 {
		return g.pick(picks...)
	}
	return g.pick("", "a", "7.2", "6.2", "7.0", "5.0", "latest", "redis:7.2", "registry.example.com/redis@sha256:abc",
		"has space", "line\nbreak", "日本語🙂", "Ünïcödé", strings.Repeat("x", 300), strings.Repeat("é", 70), "key", "value",
		"app", "kubernetes.io/hostname", "Exists", "NoSchedule", "-", ".", "0", "10", "1gb", "allkeys-lru")
}

// stringMap is a map of a few keys (redis.conf directives, odd keys), or now and then a huge one.
func (g *specGenerator) stringMap(valueSchema apiextensionsv1.JSONSchemaProps, depth int) map[string]any {
	n := g.r.IntN(4)
	if g.r.IntN(10) == 0 {
		n = 70
	}
	out := map[string]any{}
	for i := range n {
		key := g.pick("maxmemory", "maxmemory-policy", "timeout", "hz", "appendonly", "loadmodule", "replicaof",
			"min-replicas-to-write", "Bad Key", "", "x", "notify-keyspace-events", "app", "kubernetes.io/arch",
			"user", "cluster-port", "slaveof", "cluster-announce-ip", "cluster-require-full-coverage").(string)
		if n <= 4 && (g.plausible || g.r.IntN(2) == 0) {
			// A directive of the allow-list, with its example, its counter-example or an odd value.
			d := cachev1.ConfigDirectives[g.r.IntN(len(cachev1.ConfigDirectives))]
			key = d.Name
			if g.plausible {
				out[key] = d.Example
			} else {
				out[key] = g.pick(d.Example, d.Bad, d.Example, "-1", "1.5", "yes")
			}
			continue
		}
		if n > 4 {
			key = fmt.Sprintf("key-%d", i)
		}
		out[key] = g.value(key, valueSchema, depth+1)
	}
	return out
}

func (g *specGenerator) pick(values ...any) any { return values[g.r.IntN(len(values))] }

// enumValue is one of the values the schema enumerates.
func (g *specGenerator) enumValue(s apiextensionsv1.JSONSchemaProps) any {
	var v any
	_ = yaml.Unmarshal(s.Enum[g.r.IntN(len(s.Enum))].Raw, &v)
	return v
}

// plausibleString is what a user would write in a string field: its enum's values, the first
// (good) value of namedStrings, or a value of the field's kind.
func (g *specGenerator) plausibleString(name string, s apiextensionsv1.JSONSchemaProps) any {
	if len(s.Enum) > 0 {
		return g.enumValue(s)
	}
	if s.Format == "duration" {
		return g.pick("5s", "1m", "90s")
	}
	if picks, ok := namedStrings[name]; ok {
		return picks[0]
	}
	if v, ok := plausibleStrings[name]; ok {
		return v
	}
	return "a"
}

// plausibleStrings are good values of string fields namedStrings does not name.
var plausibleStrings = map[string]any{
	"version": "7.2", "image": "redis:7.2", "key": "password", "topologyKey": "topology.kubernetes.io/zone",
	"region": "us-east-1", "credentialsSecret": "s3", "secretName": "tls", "operator": "Exists",
}

// namedStrings are values for the string fields of these names, the first one good.
var namedStrings = map[string][]any{
	"schedule": {"0 3 * * *", "@daily", "@every 6h", "@every 1s", "@every -1h", "60 * * * *", "30-10 * * * *",
		"*/0 * * * *", "0 0 * * 7", "CRON_TZ=UTC 0 3 * * *", "0\t3 * * *", "@reboot"},
	"rules": {"~app:* +@read", "~app:*\tnopass +@all", "~app:*  +get", "(~temp:* +set)", "+get >pw", "~a\u00a0#abc",
		"%R~* +config|get", "nopass"},
	"bucket":           {"redis-backups", "a..b", "192.168.1.1", "Backups", "xn--abc", "ab"},
	"endpoint":         {"https://s3.example.com", "http://10.0.0.1:9000", "https://k:s@s3.example.com", "https://h/path", "s3.example.com"},
	"prefix":           {"prod", "a/../b", "a//b", "./x", "prod/sessions"},
	"cluster":          {"sessions", "other/sessions", "Sessions"},
	"fromBackup":       {"sessions-20261201", "a/b", "."},
	"claimName":        {"backups", "My Backups"},
	"storageClassName": {"fast", "", "Fast SSD"},
	// Issue 43's: versions Redis's own before 7.0, references the kubelet refuses, keys
	// kubectl cannot write, and the Secrets of fuzz-1 (the fuzz suite's names) it owns.
	"version":           {"7.2", "7.0", "6.2", "5.0", "8.0", "10.0", "7", "7.2.4", "07.2"},
	"image":             {"redis:7.2", "localhost:5000/redis", "Redis:7", "redis@sha256:abc", "[::1]:5000/redis", strings.Repeat("a", 248), "a//b", "mirror.example.com/redis:7.2"},
	"key":               {"password", ".", "..x", "a b", "tls.crt", "-"},
	"credentialsSecret": {"s3", "fuzz-1-auth-conf", "fuzz-1-operator", "S3"},
	"name":              {"a", "fuzz-1-auth-conf", "fuzz-1-auth-previous", "fuzz-1-auth", "-x"},
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
