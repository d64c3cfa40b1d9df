// Command redis-operator-scorecard is redis-operator's scorecard test image: the tests of the
// operator itself, which operator-sdk's built-in ones (its scorecard-test image) do not test. As
// the scorecard test-image contract says, it finds the bundle at /bundle, runs the test named by
// its argument and prints a v1alpha3.TestStatus as JSON on stdout. Outside a pod it takes
// --bundle and --kubeconfig.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/org/redis-operator/scorecard/checks"
)

func main() {
	bundle := flag.String("bundle", "/bundle", "the bundle directory")
	namespace := flag.String("namespace", os.Getenv("SCORECARD_NAMESPACE"), "namespace for the cluster tests (scorecard sets SCORECARD_NAMESPACE)")
	timeout := flag.Duration("timeout", 3*time.Minute, "how long a RedisCluster may take to become Ready")
	flag.Parse()

	if flag.NArg() != 1 {
		fmt.Fprintf(os.Stderr, "usage: redis-operator-scorecard [flags] TEST\n")
		os.Exit(2)
	}
	name := flag.Arg(0)
	status := errorStatus(name, fmt.Errorf("unknown test %q", name))
	if checks.Online[name] != nil {
		status = runOnline(name, *bundle, *namespace, *timeout)
	}
	if err := json.NewEncoder(os.Stdout).Encode(status); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func runOnline(name, bundle, namespace string, timeout time.Duration) scapiv1alpha3.TestStatus {
	cfg, err := config.GetConfig()
	if err != nil {
		return errorStatus(name, fmt.Errorf("no cluster: %w", err))
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return errorStatus(name, err)
	}
	if namespace == "" {
		namespace = "default"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	return checks.Online[name](ctx, checks.Cluster{Client: c, Namespace: namespace, Timeout: timeout}, bundle)
}

func errorStatus(name string, err error) scapiv1alpha3.TestStatus {
	return scapiv1alpha3.TestStatus{Results: []scapiv1alpha3.TestResult{{
		Name: name, State: scapiv1alpha3.ErrorState, Errors: []string{err.Error()},
	}}}
}
