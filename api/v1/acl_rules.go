package v1

import (
	"fmt"
	"regexp"
	"strings"
)

// The grammar of spec.users[].rules, defined once: the API server refuses rules that do not
// match UserRulesPattern (the CEL rule on ACLRules is rendered from it by `make generate`), and
// the operator splits rules into ACL SETUSER arguments only after matching the same expression
// (SplitUserRules), so what Redis receives is exactly what the API accepted.
//
// Rules are tokens of printable ASCII separated by single spaces. A whitespace character other
// than the single space (a tab, a newline, a non-breaking space) is never part of a token: it
// would let a key pattern smuggle in a token of its own (nopass, >password, #hash). Patterns
// hold no quote, since Redis reads the users of its configuration file with quotes as quoting.
// The forms are Redis's own:
//   - key patterns ~p, %R~p, %W~p, %RW~p; channel patterns &p;
//   - allkeys, allchannels, allcommands, nocommands, resetkeys, resetchannels;
//   - commands and categories allowed or denied: +get, -@dangerous, +config|get;
//   - selectors (Redis 7): a parenthesised group of the forms above, "(~temp:* +get)", and
//     clearselectors.
//
// Never passwords (>p, <p, #h, !h, nopass, resetpass), on/off or reset: the operator sets those.
const (
	aclPatternChars  = `[!#-&(-~]` // printable ASCII but space, " and '
	aclSelectorChars = `[!#-&*-~]` // the same without ( and ), which delimit a selector
	aclCommand       = `[+-](@[a-z0-9_-]+|[a-z][a-z0-9_-]*([|][a-z0-9_-]+)?)`
	aclKeywords      = `allkeys|allchannels|allcommands|nocommands|resetkeys|resetchannels`
	aclPatternPrefix = `(~|%R~|%W~|%RW~|&)`
	aclSelectorToken = `(` + aclPatternPrefix + aclSelectorChars + `+|` + aclKeywords + `|` + aclCommand + `)`
	aclToken         = `(` + aclPatternPrefix + aclPatternChars + `+|` + aclKeywords + `|` + aclCommand + `|clearselectors|[(]` + aclSelectorToken + `( ` + aclSelectorToken + `)*[)])`
	UserRulesPattern = `^(` + aclToken + `( ` + aclToken + `)*)?$`
	// UserRulesMaxLength bounds a user's rules, in the API (ACLRules) and in SplitUserRules.
	UserRulesMaxLength = 1024
)

var userRules = regexp.MustCompile(UserRulesPattern)

// SplitUserRules splits a user's rules into ACL SETUSER arguments: one per token, a selector
// as one argument. Rules the grammar refuses (an object stored before the API refused them)
// are an error, never split another way.
func SplitUserRules(rules string) ([]string, error) {
	if len(rules) > UserRulesMaxLength || !userRules.MatchString(rules) {
		return nil, fmt.Errorf("rules %q are not tokens of key and channel patterns, keywords, commands, categories and selectors separated by single spaces", rules)
	}
	if rules == "" {
		return nil, nil
	}
	var args []string
	selector := ""
	for _, token := range strings.Split(rules, " ") {
		switch {
		case selector != "":
			selector += " " + token
			if strings.HasSuffix(token, ")") {
				args, selector = append(args, selector), ""
			}
		case strings.HasPrefix(token, "(") && !strings.HasSuffix(token, ")"):
			selector = token
		default:
			args = append(args, token)
		}
	}
	return args, nil
}
