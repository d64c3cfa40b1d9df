package resources

import (
	"strconv"
	"strings"
	"time"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// HandoverWait is the longest the preStop hook holds a primary's SIGTERM, waiting for the
// operator to hand its role to a replica. It and Redis's own shutdown (shutdown-timeout, 10 s by
// default: a primary waits that long at most for its replicas to take its last writes) fit in
// the pod's terminationGracePeriodSeconds.
const HandoverWait = 15 * time.Second

// TerminationGracePeriod is the pod's terminationGracePeriodSeconds: the hook's wait, Redis's
// shutdown, and a margin.
const TerminationGracePeriod = 30

// handoverHook is the Redis container's preStop hook. When a primary's pod is deleted (a drain's
// eviction, kubectl delete pod), the kubelet runs it before it sends Redis SIGTERM; while the
// node is a primary with a replica connected, it waits (at most HandoverWait), so that the
// operator, which sees the pod's deletion, hands the role over as a switchover (writes held, the
// replica caught up, then promoted) while this Redis still answers, instead of a failover once
// it is gone. It returns at once on a replica, on a primary without replicas (a single node:
// nobody to hand over to), and when Redis does not answer. It asks Redis with the image's own
// redis-cli (valkey-cli in a Valkey image), logged in with the password file of the auth-conf
// Secret (through REDISCLI_AUTH: never in argv); an image without a shell or either client
// fails the hook, which the kubelet reports in an Event (FailedPreStopHook) before it stops the
// container as it would have without one: the operator then fails over once the node is gone.
func handoverHook(rc *cachev1.RedisCluster) *corev1ac.LifecycleApplyConfiguration {
	return corev1ac.Lifecycle().WithPreStop(corev1ac.LifecycleHandler().
		WithExec(corev1ac.ExecAction().WithCommand("/bin/sh", "-c", HandoverScript(rc))))
}

// HandoverScript is the hook's shell script (POSIX sh: the official images' dash, busybox).
func HandoverScript(rc *cachev1.RedisCluster) string {
	args := []string{"-p", strconv.Itoa(RedisPort)}
	if t := rc.Spec.TLS; t != nil {
		args = append(args, "--tls", "--cacert", TLSDir+"/"+TLSCAKey)
		if t.ClientAuth {
			args = append(args, "--cert", TLSDir+"/"+TLSCertKey, "--key", TLSDir+"/"+TLSKeyKey)
		}
	}
	return strings.NewReplacer(
		"$WAIT", strconv.Itoa(int(HandoverWait/time.Second)),
		"$PASSWORD_FILE", AuthDir+"/"+PasswordKey,
		"$ARGS", strings.Join(args, " "),
	).Replace(handoverScript)
}

const handoverScript = `cli=$(command -v redis-cli || command -v valkey-cli) || exit 0
end=$(( $(date +%s) + $WAIT ))
while [ "$(date +%s)" -lt "$end" ]; do
  info=$(REDISCLI_AUTH="$(cat $PASSWORD_FILE)" "$cli" $ARGS INFO replication 2>/dev/null | tr -d '\r')
  case "$info" in *role:master*) ;; *) exit 0 ;; esac
  case "$info" in *connected_slaves:0*) exit 0 ;; esac
  sleep 0.2 2>/dev/null || sleep 1
done
`
