// Command admissionrules renders the API's tables into the CEL rules the API server enforces:
// spec.config's allow-list of directives with the grammar of each value
// (api/v1/config_directives.go) and the grammar of spec.users[].rules (api/v1/acl_rules.go).
// `make generate` writes its output to api/v1/zz_generated.admission.go; controller-gen then
// puts the rules into the CRD. The tables stay the one definition: the admission tests read
// them too.
package main

import (
	"fmt"
	"go/format"
	"maps"
	"os"
	"slices"
	"strings"

	cachev1 "github.com/org/redis-operator/api/v1"
)

func main() {
	out := render
	if len(os.Args) > 2 && os.Args[1] == "blocks" {
		if err := spliceSpecRules(os.Args[2:]...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "docs" {
		out = renderDocs
	}
	text := out()
	if !strings.HasPrefix(text, "<!--") {
		formatted, err := format.Source([]byte(text))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		text = string(formatted)
	}
	if _, err := os.Stdout.WriteString(text); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// quote is a CEL raw string literal: the expressions hold no quote of their own kind.
func quote(s string) string {
	if strings.Contains(s, "'") {
		panic("a value holds a single quote: " + s)
	}
	return "r'" + s + "'"
}

func list(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

func mapOf(keys []string, value func(string) string) string {
	entries := make([]string, len(keys))
	for i, k := range keys {
		entries[i] = quote(k) + ": " + value(k)
	}
	return "{" + strings.Join(entries, ", ") + "}"
}

// Rules that need more than one field sit in the doc comment of the type that holds them all,
// between two marker lines that controller-gen leaves out of the description:
// "// +redis-operator:admissionrules:begin:<block>" and the same with end.
func blocks() map[string][]rule {
	return map[string][]rule{
		"spec":    append(versionRules(), specRelationRules()...),
		"cluster": ownedNameRules(),
		"backup":  backupRules(),
		"image":   {imageRule()},
	}
}

// spliceSpecRules writes each block's rules between its marker lines in the files.
func spliceSpecRules(files ...string) error {
	all := blocks()
	found := map[string]bool{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		text := string(raw)
		for _, key := range slices.Sorted(maps.Keys(all)) {
			begin, end := "// +redis-operator:admissionrules:begin:"+key+"\n", "// +redis-operator:admissionrules:end:"+key+"\n"
			i, j := strings.Index(text, begin), strings.Index(text, end)
			if i < 0 || j < i {
				continue
			}
			found[key] = true
			// The markers keep the indentation of the begin line (a field's comment).
			indent := text[strings.LastIndex(text[:i], "\n")+1 : i]
			var b strings.Builder
			for _, r := range all[key] {
				b.WriteString(indent + r.marker())
			}
			b.WriteString(indent)
			text = text[:i+len(begin)] + b.String() + text[j:]
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			return err
		}
	}
	for key := range all {
		if !found[key] {
			return fmt.Errorf("no block %q in %v", key, files)
		}
	}
	return nil
}

// rule is one x-kubernetes-validations entry; its messageExpression names the first directive
// in the way.
// A message that is a plain CEL string literal is written as a static message: it costs the API
// server nothing to estimate.
type rule struct{ expr, message, fieldPath string }

func (r rule) marker() string {
	msg := r.message
	if strings.ContainsRune(r.expr+msg, '`') {
		panic("a rule holds a backquote")
	}
	field := ""
	if r.fieldPath != "" {
		field = fmt.Sprintf(",fieldPath=%q", r.fieldPath)
	}
	if static := strings.Trim(msg, "'"); len(msg) > 1 && msg == "'"+static+"'" && !strings.Contains(static, "'") {
		return fmt.Sprintf("// +kubebuilder:validation:XValidation:rule=`%s`,message=%q%s\n", r.expr, static, field)
	}
	return fmt.Sprintf("// +kubebuilder:validation:XValidation:rule=`%s`,messageExpression=`%s`%s\n", r.expr, msg, field)
}

func configRules() []rule {
	byKind := map[cachev1.ConfigValueKind][]cachev1.ConfigDirective{}
	var allowed []string
	for _, d := range cachev1.ConfigDirectives {
		byKind[d.Kind] = append(byKind[d.Kind], d)
		allowed = append(allowed, d.Name)
	}
	names := func(kind cachev1.ConfigValueKind) []string {
		var out []string
		for _, d := range byKind[kind] {
			out = append(out, d.Name)
		}
		return out
	}
	owned := slices.Sorted(maps.Keys(cachev1.ConfigOwnedBySpec))
	ownedMap := mapOf(owned, func(k string) string { return quote(cachev1.ConfigOwnedBySpec[k]) })
	runsCode := list(cachev1.ConfigRunsCode)

	// Rows are lists of strings (CEL's list literals hold one type). Each rule iterates over a
	// constant list of the table's entries, built once, never over a
	// literal rebuilt for each key of spec.config: the API server estimates a rule's cost before
	// it takes the CRD.
	var intRows, sizeRows, enumRows, patternRows []string
	for _, d := range cachev1.ConfigDirectives {
		switch d.Kind {
		case cachev1.ConfigInt:
			intRows = append(intRows, fmt.Sprintf("[%s, '%d', '%d']", quote(d.Name), d.Min, d.Max))
		case cachev1.ConfigSize:
			// [name, percent, zero allowed, what it takes, then for each unit u of sizeUnits
			// the bounds in units of u: a value of n units is within [lo, hi] bytes when n is
			// within [ceil(lo/u), floor(hi/u)]].
			row := []string{quote(d.Name), "'" + yes(d.Percent) + "'", "'" + yes(d.ZeroAllowed) + "'", quote(sizeRange(d))}
			for _, u := range sizeUnits {
				row = append(row, fmt.Sprintf("'%d'", (d.MinBytes+u.bytes-1)/u.bytes), fmt.Sprintf("'%d'", d.MaxBytes/u.bytes))
			}
			sizeRows = append(sizeRows, "["+strings.Join(row, ", ")+"]")
		case cachev1.ConfigEnum:
			enumRows = append(enumRows, fmt.Sprintf("[%s, %s, %s]", quote(d.Name), quote("^("+strings.Join(d.Values, "|")+")$"), quote(strings.Join(d.Values, ", "))))
		case cachev1.ConfigPattern:
			patternRows = append(patternRows, fmt.Sprintf("[%s, %s, %s]", quote(d.Name), quote(d.Pattern), quote(d.Describe)))
		}
	}
	ints := "[" + strings.Join(intRows, ", ") + "]"
	sizes := "[" + strings.Join(sizeRows, ", ") + "]"
	var unitIndex []string
	for i, u := range sizeUnits {
		// Keyed by "u" and the unit: gofmt turns two single quotes in a comment into a
		// typographic quote.
		unitIndex = append(unitIndex, fmt.Sprintf("'u%s': %d", u.name, 4+2*i))
	}
	enums := "[" + strings.Join(enumRows, ", ") + "]"
	patterns := "[" + strings.Join(patternRows, ", ") + "]"
	var aliases []string
	for _, a := range cachev1.ConfigAliases {
		aliases = append(aliases, list(a[:]))
	}
	aliasList := "[" + strings.Join(aliases, ", ") + "]"
	known := list(append(append(allowed, owned...), cachev1.ConfigRunsCode...))

	// CEL has no let: [x].all(name, e) binds name to x in e.
	//
	// An integer (v) is within [d[1], d[2]] when, compared as decimal strings (no int() that a
	// 20-digit value would overflow): a negative one is at most as long as a negative d[1]
	// allows, a positive one at least d[1] and at most d[2].
	intOK := fmt.Sprintf("[self[d[0]]].all(v, v.matches(%s) && (v.startsWith('-') ? (d[1].startsWith('-') && %s) : ((d[1].startsWith('-') || %s) && %s)))",
		quote(cachev1.ConfigIntPattern), le("v.substring(1)", "d[1].substring(1)"), le("d[1]", "v"), le("v", "d[2]"))
	// A size (v, "" read as 0): its digits (g) without leading zeros (n) within the bounds of its
	// unit, at d[i] and d[i+1].
	sizeOK := fmt.Sprintf("[self[d[0]] == '\"\"' ? '0' : self[d[0]]].all(v, (d[1] == 'yes' && v.matches(%s)) || (v.matches(%s) && [v.find('^[0-9]+')].all(g, "+
		"[g.find('[1-9][0-9]*').size() == 0 ? '0' : g.find('[1-9][0-9]*')].all(n, [{%s}['u' + v.substring(g.size()).lowerAscii()]].all(i, "+
		"(d[2] == 'yes' && n == '0') || (%s && %s))))))",
		quote(cachev1.ConfigPercentPattern), quote(cachev1.ConfigSizePattern), strings.Join(unitIndex, ", "), le("d[i]", "n"), le("n", "d[i + 1]"))

	return []rule{
		{
			expr:    fmt.Sprintf("!%s.exists(k, k in self)", runsCode),
			message: fmt.Sprintf("%s.filter(k, k in self).map(k, 'spec.config.' + k + ' is refused: it loads code into Redis or opens its module, debug or protected-config commands')[0]", runsCode),
		},
		{
			expr:    fmt.Sprintf("!%s.exists(k, k in self)", list(owned)),
			message: fmt.Sprintf("%s.filter(k, k in self).map(k, 'spec.config.' + k + ' is not set in spec.config: set ' + %s[k])[0]", list(owned), ownedMap),
		},
		{
			expr:    fmt.Sprintf("self.all(k, k in %s)", known),
			message: fmt.Sprintf("self.filter(k, !(k in %s)).map(k, 'spec.config.' + k + ' is not a setting this operator exposes (it manages addresses, replication, auth, TLS and paths itself); open an issue if you need it')[0]", known),
		},
		{
			expr:    "self.all(k, !self[k].matches(r'[\\x00-\\x1f\\x7f]'))",
			message: "self.filter(k, self[k].matches(r'[\\x00-\\x1f\\x7f]')).map(k, 'spec.config.' + k + ' holds a control character (a tab, a newline): values are printable')[0]",
		},
		{
			expr:    fmt.Sprintf("%s.all(k, !(k in self) || self[k].lowerAscii() == 'yes' || self[k].lowerAscii() == 'no')", list(names(cachev1.ConfigBool))),
			message: fmt.Sprintf("%s.filter(k, k in self && self[k].lowerAscii() != 'yes' && self[k].lowerAscii() != 'no').map(k, 'spec.config.' + k + ' is yes or no')[0]", list(names(cachev1.ConfigBool))),
		},
		{
			expr:    fmt.Sprintf("%s.all(d, !(d[0] in self) || (%s))", ints, intOK),
			message: fmt.Sprintf("%s.filter(d, d[0] in self && !(%s)).map(d, 'spec.config.' + d[0] + ' is an integer from ' + d[1] + ' to ' + d[2] + ', written as Redis reads it: no sign but -, no leading zero, no space')[0]", ints, intOK),
		},
		{
			expr:    fmt.Sprintf("%s.all(d, !(d[0] in self) || %s)", sizes, sizeOK),
			message: fmt.Sprintf("%s.filter(d, d[0] in self && !(%s)).map(d, 'spec.config.' + d[0] + ' is ' + d[3])[0]", sizes, sizeOK),
		},
		{
			expr:    fmt.Sprintf("%s.all(d, !(d[0] in self) || self[d[0]].lowerAscii().matches(d[1]))", enums),
			message: fmt.Sprintf("%s.filter(d, d[0] in self && !self[d[0]].lowerAscii().matches(d[1])).map(d, 'spec.config.' + d[0] + ' is one of ' + d[2])[0]", enums),
		},
		{
			expr:    fmt.Sprintf("%s.all(d, !(d[0] in self) || self[d[0]].matches(d[1]))", patterns),
			message: fmt.Sprintf("%s.filter(d, d[0] in self && !self[d[0]].matches(d[1])).map(d, 'spec.config.' + d[0] + ' is ' + d[2])[0]", patterns),
		},
		{
			expr:    fmt.Sprintf("!%s.exists(p, p[0] in self && p[1] in self)", aliasList),
			message: fmt.Sprintf("%s.filter(p, p[0] in self && p[1] in self).map(p, 'spec.config sets ' + p[0] + ' and ' + p[1] + ', two names of one setting: set one')[0]", aliasList),
		},
	}
}

// le is a CEL expression: decimal strings a <= b, both without sign or leading zero.
func le(a, b string) string {
	return fmt.Sprintf("(%[1]s.size() < %[2]s.size() || (%[1]s.size() == %[2]s.size() && %[1]s <= %[2]s))", a, b)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// sizeUnits are memtoull's units, as lowerAscii leaves them.
var sizeUnits = []struct {
	name  string
	bytes uint64
}{{"", 1}, {"b", 1}, {"k", 1000}, {"kb", 1024}, {"m", 1000 * 1000}, {"mb", 1 << 20}, {"g", 1000 * 1000 * 1000}, {"gb", 1 << 30}}

// sizeRange is what a size directive takes, in words.
func sizeRange(d cachev1.ConfigDirective) string {
	s := fmt.Sprintf("a size in bytes from %d to %d", d.MinBytes, d.MaxBytes)
	if d.ZeroAllowed {
		s = fmt.Sprintf("0 (no limit) or a size in bytes from %d to %d", d.MinBytes, d.MaxBytes)
	}
	s += " (1048576, 64kb, 100mb, 1gb; k is 1000, kb 1024)"
	if d.Percent {
		s += ", or a percentage of maxmemory from 0% to 100%"
	}
	return s
}

// versionRules are the rules on RedisClusterSpec that refuse a directive newer than
// spec.version, one per version that introduced directives after MinVersion.
func versionRules() []rule {
	bySince := map[string][]string{}
	for _, d := range cachev1.ConfigDirectives {
		if d.Since != "" {
			bySince[d.Since] = append(bySince[d.Since], d.Name)
		}
	}
	var rules []rule
	for _, since := range slices.Sorted(maps.Keys(bySince)) {
		var major, minor int
		if _, err := fmt.Sscanf(since, "%d.%d", &major, &minor); err != nil {
			panic("a directive's Since is not major.minor: " + since)
		}
		names := list(bySince[since])
		atLeast := fmt.Sprintf("!self.version.matches('^[0-9]{1,8}[.][0-9]{1,8}') || int(self.version.split('.')[0]) > %[1]d || (int(self.version.split('.')[0]) == %[1]d && int(self.version.split('.')[1]) >= %[2]d)", major, minor)
		rules = append(rules, rule{
			expr:      fmt.Sprintf("!has(self.config) || !has(self.version) || !%s.exists(k, k in self.config) || %s", names, atLeast),
			message:   fmt.Sprintf("'spec.config.' + %s.filter(k, k in self.config)[0] + ' needs Redis %s or newer; spec.version is ' + self.version", names, since),
			fieldPath: ".config",
		})
	}
	return rules
}

func render() string {
	var b strings.Builder
	b.WriteString(`// Code generated by hack/admissionrules from config_directives.go and acl_rules.go. DO NOT EDIT.

package v1

// RedisConfig holds redis.conf settings by directive, {"maxmemory": "256mb"}: the directives
// of ConfigDirectives, each with a value of its grammar.
// +kubebuilder:validation:MaxProperties=64
`)
	for _, r := range configRules() {
		b.WriteString(r.marker())
	}
	b.WriteString("type RedisConfig map[string]ConfigValue\n\n")
	b.WriteString("// ACLRules are a user's ACL rules, of the grammar of UserRulesPattern.\n")
	fmt.Fprintf(&b, "// +kubebuilder:validation:MaxLength=%d\n", cachev1.UserRulesMaxLength)
	fmt.Fprintf(&b, "// +kubebuilder:validation:XValidation:rule=`self.matches(%s)`,message=%q\n", quote(cachev1.UserRulesPattern),
		"spec.users[].rules may hold only key and channel patterns (~, %R~, %W~, %RW~, &), allkeys, allchannels, allcommands, nocommands, "+
			"resetkeys, resetchannels, +/- commands or @categories, and selectors of those in parentheses, separated by single spaces, "+
			"in printable ASCII without quotes; passwords, on/off and reset come from the operator")
	b.WriteString("type ACLRules string\n")
	return b.String()
}

// renderDocs is docs/config.md: the allow-list as users read it (`admissionrules docs`).
func renderDocs() string {
	var b strings.Builder
	b.WriteString(`<!-- Generated by hack/admissionrules from api/v1/config_directives.go (make generate). Do not edit. -->
# spec.config: the redis.conf directives a RedisCluster takes

` + "`spec.config`" + ` takes these directives and no others; the API server refuses any other with
"not a setting this operator exposes; open an issue if you need it", and a value outside its
grammar with a message naming the directive. Values are strings (` + "`timeout: \"300\"`" + `),
read as Redis reads them: integers without a sign but ` + "`-`" + ` and without leading zeros; sizes
as digits and a unit in any case (` + "`k`" + ` is 1000, ` + "`kb`" + ` 1024; no digits is 0); yes, no and
the named values in any case; ` + "`\"\"`" + ` for none where a list may be empty. A test sends values
generated from each grammar both to the API server and to a real redis-server (7.0.15), and
they agree but where the last column says why the API takes less.

Directives named ` + "`cluster-*`" + ` need ` + "`spec.cluster`" + `. A directive newer than ` + "`spec.version`" + `
is refused, naming the version that introduced it (the "since" column, checked against Redis's
` + "`src/config.c`" + ` at each release tag); ` + "`spec.version`" + ` is ` + cachev1.MinVersion + ` or newer.
` + "`activedefrag yes`" + ` needs ` + "`spec.image`" + `: the operator's images run Debian's redis-server,
built without the jemalloc active defragmentation needs.

| directive | value | example | since | the API takes less than Redis |
|---|---|---|---|---|
`)
	for _, d := range cachev1.ConfigDirectives {
		var value string
		switch d.Kind {
		case cachev1.ConfigBool:
			value = "yes or no"
		case cachev1.ConfigInt:
			value = fmt.Sprintf("integer, %d to %d", d.Min, d.Max)
		case cachev1.ConfigSize:
			value = sizeRange(d)
		case cachev1.ConfigEnum:
			value = strings.Join(d.Values, ", ")
		case cachev1.ConfigPattern:
			value = d.Describe
		}
		since := d.Introduced
		if since == "" {
			since = "6.0 or older"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s | %s |\n", d.Name, strings.ReplaceAll(value, "|", "\\|"), d.Example, since, d.Narrower)
	}
	b.WriteString("\nSet by other fields, and refused here:\n\n")
	for _, k := range slices.Sorted(maps.Keys(cachev1.ConfigOwnedBySpec)) {
		fmt.Fprintf(&b, "- `%s`: %s\n", k, cachev1.ConfigOwnedBySpec[k])
	}
	b.WriteString("\nRefused because they load code into Redis or open its DEBUG, MODULE or protected CONFIG commands: ")
	var code []string
	for _, k := range cachev1.ConfigRunsCode {
		code = append(code, "`"+k+"`")
	}
	b.WriteString(strings.Join(code, ", ") + ".\n\nTwo names of one setting are refused together: ")
	var pairs []string
	for _, a := range cachev1.ConfigAliases {
		pairs = append(pairs, "`"+a[0]+"` and `"+a[1]+"`")
	}
	b.WriteString(strings.Join(pairs, "; ") + ".\n")
	return b.String()
}

// specRelationRules refuse directives that cannot work with the rest of the spec: those that need
// spec.storage's append-only file, and those cluster mode does not read.
func specRelationRules() []rule {
	var aof, notCluster []string
	for _, d := range cachev1.ConfigDirectives {
		if d.NeedsStorage {
			aof = append(aof, d.Name)
		}
		if d.NotInClusterMode {
			notCluster = append(notCluster, d.Name)
		}
	}
	return []rule{{
		expr:      fmt.Sprintf("has(self.storage) || !has(self.config) || !%s.exists(k, k in self.config)", list(aof)),
		message:   fmt.Sprintf("'spec.config.' + %s.filter(k, k in self.config)[0] + ' tunes the append-only file, which a RedisCluster keeps only with spec.storage: set spec.storage, or leave it out'", list(aof)),
		fieldPath: ".config",
	}, {
		expr:      fmt.Sprintf("!has(self.cluster) || !has(self.config) || !%s.exists(k, k in self.config)", list(notCluster)),
		message:   fmt.Sprintf("'spec.config.' + %s.filter(k, k in self.config)[0] + ' is not read in cluster mode (spec.cluster): a Redis Cluster has one database'", list(notCluster)),
		fieldPath: ".config",
	}}
}

// ownedNameRules, on RedisCluster, refuse references to the Secrets the operator owns for it, an
// application user with the default user's password, and a backup claim that is one of its
// data claims.
func ownedNameRules() []rule {
	n := "self.metadata.name"
	// The generated password's Secret is the operator's only without spec.auth; with it, the
	// list repeats another entry.
	owned := fmt.Sprintf("[%[1]s + '%[2]s', %[1]s + '%[3]s', %[1]s + '%[4]s', has(self.spec.auth) ? %[1]s + '%[2]s' : %[1]s + '%[5]s']",
		n, cachev1.AuthConfSecretSuffix, cachev1.PreviousPasswordSecretSuffix, cachev1.OperatorSecretSuffix, cachev1.GeneratedPasswordSecretSuffix)
	ownedWords := fmt.Sprintf("the Secrets the operator owns for this RedisCluster (<name>%s, <name>%s, <name>%s, and <name>%s without spec.auth): the operator would overwrite or delete it, or hand its password on",
		cachev1.AuthConfSecretSuffix, cachev1.PreviousPasswordSecretSuffix, cachev1.OperatorSecretSuffix, cachev1.GeneratedPasswordSecretSuffix)
	key := func(ref string) string { return fmt.Sprintf("(has(%[1]s.key) ? %[1]s.key : 'password')", ref) }
	claim := fmt.Sprintf("self.spec.backup.destination.persistentVolumeClaim.claimName.matches('%s')",
		fmt.Sprintf(cachev1.DataClaimPattern, "' + "+n+" + '"))
	return []rule{{
		expr:      fmt.Sprintf("!has(self.spec.auth) || !(self.spec.auth.secretRef.name in %s)", owned),
		message:   fmt.Sprintf("'spec.auth.secretRef.name is one of %s'", ownedWords),
		fieldPath: ".spec.auth.secretRef.name",
	}, {
		expr:      fmt.Sprintf("!has(self.spec.users) || self.spec.users.all(u, !(u.passwordSecretRef.name in %s))", owned),
		message:   fmt.Sprintf("'spec.users[].passwordSecretRef.name is one of %s'", ownedWords),
		fieldPath: ".spec.users",
	}, {
		expr: fmt.Sprintf("!has(self.spec.users) || !has(self.spec.auth) || self.spec.users.all(u, !(u.passwordSecretRef.name == self.spec.auth.secretRef.name && %s == %s))",
			key("u.passwordSecretRef"), key("self.spec.auth.secretRef")),
		message:   "'spec.users[].passwordSecretRef is spec.auth.secretRef, the password of the default user: give each user a password of its own'",
		fieldPath: ".spec.users",
	}, {
		expr:      fmt.Sprintf("!has(self.spec.tls) || !(self.spec.tls.secretName in %s)", owned),
		message:   fmt.Sprintf("'spec.tls.secretName is one of %s'", ownedWords),
		fieldPath: ".spec.tls.secretName",
	}, {
		expr: fmt.Sprintf("!has(self.spec.backup) || !has(self.spec.backup.destination.s3) || (!(self.spec.backup.destination.s3.credentialsSecret in %[1]s) && "+
			"(!has(self.spec.backup.destination.s3.caBundle) || !(self.spec.backup.destination.s3.caBundle.name in %[1]s)))", owned),
		message:   fmt.Sprintf("'spec.backup.destination.s3 names one of %s'", ownedWords),
		fieldPath: ".spec.backup.destination.s3",
	}, {
		expr:      fmt.Sprintf("!has(self.spec.backup) || !has(self.spec.backup.destination.persistentVolumeClaim) || !%s", claim),
		message:   "'spec.backup.destination.persistentVolumeClaim.claimName is one of the data claims of this RedisCluster (data-<statefulset>-<ordinal>): a backup would be written beside the data it saves, and lost with it'",
		fieldPath: ".spec.backup.destination.persistentVolumeClaim.claimName",
	}}
}

// backupRules, on RedisBackupSpec, refuse a destination that names the cluster's own Secrets or
// one of its data claims.
func backupRules() []rule {
	c := "self.cluster"
	owned := fmt.Sprintf("[%[1]s + '%[2]s', %[1]s + '%[3]s', %[1]s + '%[4]s', %[1]s + '%[5]s']",
		c, cachev1.AuthConfSecretSuffix, cachev1.PreviousPasswordSecretSuffix, cachev1.OperatorSecretSuffix, cachev1.GeneratedPasswordSecretSuffix)
	claim := fmt.Sprintf("self.destination.persistentVolumeClaim.claimName.matches('%s')", fmt.Sprintf(cachev1.DataClaimPattern, "' + "+c+" + '"))
	return []rule{{
		expr: fmt.Sprintf("!has(self.destination.s3) || (!(self.destination.s3.credentialsSecret in %[1]s) && "+
			"(!has(self.destination.s3.caBundle) || !(self.destination.s3.caBundle.name in %[1]s)))", owned),
		message: fmt.Sprintf("'spec.destination.s3 names one of the Secrets the operator owns for spec.cluster (<cluster>%s, %s, %s, %s)'",
			cachev1.AuthConfSecretSuffix, cachev1.PreviousPasswordSecretSuffix, cachev1.OperatorSecretSuffix, cachev1.GeneratedPasswordSecretSuffix),
		fieldPath: ".destination.s3",
	}, {
		expr:      fmt.Sprintf("!has(self.destination.persistentVolumeClaim) || !%s", claim),
		message:   "'spec.destination.persistentVolumeClaim.claimName is one of the data claims of spec.cluster (data-<statefulset>-<ordinal>): a backup would be written beside the data it saves, and lost with it'",
		fieldPath: ".destination.persistentVolumeClaim.claimName",
	}}
}

// imageRule is spec.image's grammar, the kubelet's (ImageReferencePattern), beside the
// field's older pattern: a pattern changed in place would be a CRD change OLM v1 refuses.
func imageRule() rule {
	return rule{
		// The repository path is at most 255 characters as the kubelet counts it
		// (distribution/reference's ParseNormalizedNamed): without its registry, a one-component
		// name on Docker Hub counting the library/ it is given.
		expr: fmt.Sprintf("self.matches(%s) && !self.matches('^[a-f0-9]{64}$') && [self.split('@')[0]].all(s, "+
			"[s.lastIndexOf(':') > s.lastIndexOf('/') ? s.substring(0, s.lastIndexOf(':')) : s].all(n, "+
			"!n.contains('/') ? n.size() + 8 <= 255 : [n.split('/')[0]].all(d, "+
			"!(d == 'localhost' || d.contains('.') || d.contains(':') || d.lowerAscii() != d) ? n.size() <= 255 : "+
			"[n.substring(d.size() + 1)].all(p, (d in ['docker.io', 'index.docker.io'] && !p.contains('/') ? p.size() + 8 : p.size()) <= 255))))",
			quote(cachev1.ImageReferencePattern)),
		message: "'spec.image is an image reference: [registry/]path[:tag][@digest], the path in lowercase letters, digits and separators (., _, __, -), " +
			"a tag of letters, digits, _, . and - (at most 128), a digest in full (sha256: and 64 lowercase hex digits), the path at most 255 characters (library/ counted on a one-component Docker Hub name)'",
	}
}
