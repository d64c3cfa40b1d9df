// Command tlsregistry prints where the registry of the local cluster in KUBECONFIG (make
// demo-olm) answers over HTTPS, 127.0.0.1:<port>, and writes the certificate that signs its
// certificate to --ca-file: make run-bundle names images under that address and runs
// operator-sdk with SSL_CERT_FILE set to that file.
//
//	tlsregistry --ca-file bin/local-registry-ca.crt
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/org/redis-operator/test/localcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tlsregistry:", err)
		os.Exit(1)
	}
}

func run() error {
	caFile := flag.String("ca-file", "", "where to write the registry's CA certificate (PEM)")
	flag.Parse()
	if *caFile == "" {
		return errors.New("usage: tlsregistry --ca-file FILE")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	cluster, err := localcluster.FromKubeconfig("")
	if err != nil {
		return err
	}
	host, ca, err := localcluster.LocalTLSRegistry(ctx, cluster.Client)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*caFile, ca, 0o644); err != nil {
		return err
	}
	fmt.Println(host)
	return nil
}
