// Package credentials is the RedisCluster's credentials, in both modes: the password (read from
// its Secret, or generated), the operator's own user, the users of spec.users, the TLS
// certificate, and the live settings. Its phases read them (Secrets), write the password file
// the nodes include, and give each running node what it lacks, once, through internal/auth's
// one loop (auth.Give); a password change goes step by step (passwords.go), each step safe to
// crash after.
package credentials

import (
	"github.com/org/redis-operator/internal/auth"
)

// Memory is what the reconciler remembers of one RedisCluster's credentials between
// reconciles: the credentials as last read, and what each node took of them.
type Memory struct {
	creds credsMemory
	// passwords is the default user's password each node took (again after each read of the
	// Secrets), announced the one its Event announced.
	passwords, announced auth.Given
	// users is the users each node took in full; acceptedUsers the user lines Redis took.
	users         auth.Given
	acceptedUsers acceptedLines
	// operatorUser is the operator's own user as each node took it.
	operatorUser auth.Given
	// tls is each node's certificate.
	tls tlsMemory
	// settings are the live settings each node took.
	settings auth.Given
}

// ForgetOperatorUser has every node given the operator's own user again: a node refused the
// operator a command (its user is an earlier build's).
func (m *Memory) ForgetOperatorUser() { m.operatorUser.Forget() }

// Login is how the operator logs in to the nodes, as the credentials were last read; false
// before they were.
func (m *Memory) Login() (auth.Login, bool) {
	c := m.creds.get()
	return c.Login(), c.operatorPassword != ""
}
