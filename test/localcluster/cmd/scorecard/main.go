// Command scorecard is `make scorecard-run`: what `operator-sdk scorecard` does, on the local
// cluster of make demo-olm (export the KUBECONFIG it prints): one pod per test of the bundle's
// tests/scorecard/config.yaml, results read from the pods' logs, printed as the SDK prints
// them (-o text or json); it exits 1 when a test does not pass.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/org/redis-operator/test/localcluster"
)

func main() {
	bundle := flag.String("bundle", "bundle", "the bundle directory")
	namespace := flag.String("namespace", "default", "the namespace the test pods run in")
	serviceAccount := flag.String("service-account", "redis-operator-scorecard", "the ServiceAccount of the test pods (created with what the tests need)")
	selector := flag.String("selector", "", "run only the tests whose labels match (suite=olm, test=...)")
	output := flag.String("o", "text", "text or json")
	timeout := flag.Duration("wait-time", 5*time.Minute, "how long each test may run")
	flag.Parse()
	ok, err := run(*bundle, *namespace, *serviceAccount, *selector, *output, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(bundle, namespace, serviceAccount, selector, output string, timeout time.Duration) (bool, error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	sel, err := labels.Parse(selector)
	if err != nil {
		return false, err
	}
	cluster, err := localcluster.FromKubeconfig("")
	if err != nil {
		return false, err
	}
	run := localcluster.ScorecardRun{
		Cluster:   cluster,
		Namespace: namespace, ServiceAccount: serviceAccount, Timeout: timeout,
	}
	list, err := run.Run(ctx, bundle, sel)
	if err != nil {
		return false, err
	}
	switch output {
	case "json":
		raw, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return false, err
		}
		fmt.Println(string(raw))
	default:
		fmt.Print(localcluster.PrintScorecard(list))
	}
	return localcluster.ScorecardPassed(list), nil
}
