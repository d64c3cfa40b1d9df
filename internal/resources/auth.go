package resources

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	cachev1 "github.com/org/redis-operator/api/v1"
)

const (
	// AuthConfKey is the key of the password file in the <name>-auth-conf Secret.
	AuthConfKey = "auth.conf"
	// PasswordKey is the key of the generated password in <name>-auth.
	PasswordKey = "password"
	authDir     = "/etc/redis-auth"
)

// PasswordSecretName names the Secret the operator generates when spec.auth is not set.
func PasswordSecretName(rc *cachev1.RedisCluster) string { return rc.Name + "-auth" }

// AuthConfSecretName names the Secret holding the password file Redis includes.
func AuthConfSecretName(rc *cachev1.RedisCluster) string { return rc.Name + "-auth-conf" }

// PreviousPasswordSecretName names the Secret holding the password the nodes had before the
// last change, kept until they all take the new one.
func PreviousPasswordSecretName(rc *cachev1.RedisCluster) string { return rc.Name + "-auth-previous" }

// PasswordSource is the Secret and key the password is read from.
func PasswordSource(rc *cachev1.RedisCluster) (name, key string) {
	if rc.Spec.Auth != nil {
		key = rc.Spec.Auth.SecretRef.Key
		if key == "" {
			key = PasswordKey
		}
		return rc.Spec.Auth.SecretRef.Name, key
	}
	return PasswordSecretName(rc), PasswordKey
}

// GeneratedPasswordSecret is the Secret created once, when spec.auth is not set. Its password is
// never changed by the operator afterwards.
func GeneratedPasswordSecret(rc *cachev1.RedisCluster, password string) *corev1.Secret {
	s := &corev1.Secret{}
	s.Name, s.Namespace = PasswordSecretName(rc), rc.Namespace
	s.Labels = Labels(rc)
	s.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: cachev1.GroupVersion.String(), Kind: "RedisCluster", Name: rc.Name, UID: rc.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	s.Type = corev1.SecretTypeOpaque
	s.Data = map[string][]byte{PasswordKey: []byte(password)}
	return s
}

// RandomPassword is 32 characters from a 62-letter alphabet: about 190 bits.
func RandomPassword() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	out := make([]byte, 0, 32)
	buf := make([]byte, 64)
	for len(out) < cap(out) {
		if _, err := rand.Read(buf); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		for _, b := range buf {
			// Bytes past the last whole multiple of 62 would favour the first letters.
			if int(b) < 4*len(alphabet) && len(out) < cap(out) {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}

// DesiredAuthConfSecret holds the password file Redis includes from redis.conf.
func DesiredAuthConfSecret(rc *cachev1.RedisCluster, password string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(AuthConfSecretName(rc), rc.Namespace).
		WithLabels(Labels(rc)).
		WithOwnerReferences(ownerReference(rc)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{AuthConfKey: []byte(AuthConf(password))})
}

// DesiredPreviousPasswordSecret keeps the password the nodes had before a change, written
// before their password file changes: running nodes keep the old password until they are given
// the new one, and an operator that restarts in between must still be able to log in to them.
// It is not mounted into any pod.
func DesiredPreviousPasswordSecret(rc *cachev1.RedisCluster, password string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(PreviousPasswordSecretName(rc), rc.Namespace).
		WithLabels(Labels(rc)).
		WithOwnerReferences(ownerReference(rc)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{PasswordKey: []byte(password)})
}

// PasswordInAuthConf is the password an AuthConf file sets; false when conf is not one.
func PasswordInAuthConf(conf string) (string, bool) {
	line, _, _ := strings.Cut(conf, "\n")
	quoted, ok := strings.CutPrefix(line, "requirepass ")
	if !ok || len(quoted) < 2 || quoted[0] != '"' || quoted[len(quoted)-1] != '"' || (len(quoted)-2)%4 != 0 {
		return "", false
	}
	var out []byte
	for esc := quoted[1 : len(quoted)-1]; esc != ""; esc = esc[4:] {
		b, err := hex.DecodeString(esc[2:4])
		if esc[:2] != `\x` || err != nil {
			return "", false
		}
		out = append(out, b...)
	}
	return string(out), true
}

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
