package resources

import (
	"fmt"
	"strings"
)

// AuthConf is the redis.conf fragment that sets the password: requirepass for clients and
// masterauth for a replica's link to its primary. Every byte of the password is written as a
// \xHH escape inside double quotes, so no character of it can end the value or start another
// directive. It lives in a Secret, never in the ConfigMap or in argv.
func AuthConf(password string) string {
	quoted := quoteConfValue(password)
	return fmt.Sprintf("requirepass %s\nmasterauth %s\n", quoted, quoted)
}

func quoteConfValue(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		fmt.Fprintf(&b, `\x%02x`, v[i])
	}
	b.WriteByte('"')
	return b.String()
}
