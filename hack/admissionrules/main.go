// Command admissionrules renders the API's tables into the CEL rules the API server enforces:
// spec.config's allow-list of directives with the grammar of each value
// (api/v1/config_directives.go) and the grammar of spec.users[].rules (api/v1/acl_rules.go).
// `make generate` writes its output to api/v1/zz_generated.admission.go; controller-gen then
// puts the rules into the CRD. The tables stay the one definition: the admission tests read
// them too.
package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	cachev1 "github.com/org/redis-operator/api/v1"
)

func main() {
	out := render
	if len(os.Args) > 1 && os.Args[1] == "docs" {
		out = renderDocs
	}
	if _, err := os.Stdout.WriteString(out()); err != nil {
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

// rule is one x-kubernetes-validations entry; its messageExpression names the first directive
// in the way.
type rule struct{ expr, message string }

func (r rule) marker() string {
	msg := r.message
	if strings.ContainsRune(r.expr+msg, '`') {
		panic("a rule holds a backquote")
	}
	return fmt.Sprintf("// +kubebuilder:validation:XValidation:rule=`%s`,messageExpression=`%s`\n", r.expr, msg)
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
	var intRows, enumRows, patternRows []string
	for _, d := range cachev1.ConfigDirectives {
		switch d.Kind {
		case cachev1.ConfigInt:
			intRows = append(intRows, fmt.Sprintf("[%s, '%d', '%d']", quote(d.Name), d.Min, d.Max))
		case cachev1.ConfigEnum:
			enumRows = append(enumRows, fmt.Sprintf("[%s, %s, %s]", quote(d.Name), quote("^("+strings.Join(d.Values, "|")+")$"), quote(strings.Join(d.Values, ", "))))
		case cachev1.ConfigPattern:
			patternRows = append(patternRows, fmt.Sprintf("[%s, %s, %s]", quote(d.Name), quote(d.Pattern), quote(d.Describe)))
		}
	}
	ints := "[" + strings.Join(intRows, ", ") + "]"
	enums := "[" + strings.Join(enumRows, ", ") + "]"
	patterns := "[" + strings.Join(patternRows, ", ") + "]"
	var aliases []string
	for _, a := range cachev1.ConfigAliases {
		aliases = append(aliases, list(a[:]))
	}
	aliasList := "[" + strings.Join(aliases, ", ") + "]"
	known := list(append(append(allowed, owned...), cachev1.ConfigRunsCode...))
	const integer = "'^-?[0-9]{1,18}$'"

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
			expr:    fmt.Sprintf("%s.all(k, !(k in self) || self[k] == 'yes' || self[k] == 'no')", list(names(cachev1.ConfigBool))),
			message: fmt.Sprintf("%s.filter(k, k in self && self[k] != 'yes' && self[k] != 'no').map(k, 'spec.config.' + k + ' is yes or no')[0]", list(names(cachev1.ConfigBool))),
		},
		{
			expr:    fmt.Sprintf("%s.all(d, !(d[0] in self) || (self[d[0]].matches(%s) && int(self[d[0]]) >= int(d[1]) && int(self[d[0]]) <= int(d[2])))", ints, integer),
			message: fmt.Sprintf("%s.filter(d, d[0] in self && !(self[d[0]].matches(%s) && int(self[d[0]]) >= int(d[1]) && int(self[d[0]]) <= int(d[2]))).map(d, 'spec.config.' + d[0] + ' is an integer from ' + d[1] + ' to ' + d[2])[0]", ints, integer),
		},
		{
			expr:    fmt.Sprintf("%s.all(k, !(k in self) || self[k].matches(%s))", list(names(cachev1.ConfigSize)), quote(cachev1.ConfigSizePattern)),
			message: fmt.Sprintf("%s.filter(k, k in self && !self[k].matches(%s)).map(k, 'spec.config.' + k + ' is a size in bytes: 1048576, 64kb, 100mb, 1gb')[0]", list(names(cachev1.ConfigSize)), quote(cachev1.ConfigSizePattern)),
		},
		{
			expr:    fmt.Sprintf("%s.all(d, !(d[0] in self) || self[d[0]].matches(d[1]))", enums),
			message: fmt.Sprintf("%s.filter(d, d[0] in self && !self[d[0]].matches(d[1])).map(d, 'spec.config.' + d[0] + ' is one of ' + d[2])[0]", enums),
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
grammar with a message naming the directive. Values are strings (` + "`timeout: \"300\"`" + `).
Directives named ` + "`cluster-*`" + ` need ` + "`spec.cluster`" + `. Redis checks the rest when it
starts: a value it refuses shows as ` + "`RedisFailedToStart`" + ` with its own words.

| directive | value | example | since |
|---|---|---|---|
`)
	for _, d := range cachev1.ConfigDirectives {
		var value string
		switch d.Kind {
		case cachev1.ConfigBool:
			value = "yes or no"
		case cachev1.ConfigInt:
			value = fmt.Sprintf("integer, %d to %d", d.Min, d.Max)
		case cachev1.ConfigSize:
			value = "bytes: 1048576, 64kb, 100mb, 1gb"
		case cachev1.ConfigEnum:
			value = strings.Join(d.Values, ", ")
		case cachev1.ConfigPattern:
			value = d.Describe
		}
		since := d.Since
		if since == "" {
			since = "6.0"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", d.Name, strings.ReplaceAll(value, "|", "\\|"), d.Example, since)
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
