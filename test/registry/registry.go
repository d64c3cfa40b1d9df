// Package registry runs an OCI registry for the local cluster: go-containerregistry's registry,
// on a 127.0.0.1 port, with its blobs on disk under the caller's directory. The node's
// containerd pulls every image through it, under the image's real name (docker.io/library/redis,
// example.com/redis-operator), as an air-gapped cluster pulls from its mirror.
package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is a running registry.
type Registry struct {
	// Host is its address, 127.0.0.1:<port>, over plain HTTP.
	Host string
	// TLSHost is its address over HTTPS once ServeTLS has started it, 127.0.0.1:<port>: for
	// clients that reach a registry over HTTPS only (operator-sdk run bundle reads its index
	// image's labels so, whatever its --use-http says).
	TLSHost string
	handler http.Handler
	servers []*http.Server
	done    chan error
}

// Start serves a registry with its blobs under dir until Stop, over HTTP. Manifests live in
// memory: a harness pushes its images after each start.
func Start(dir string) (*Registry, error) {
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	r := &Registry{done: make(chan error, 2),
		handler: ggcrregistry.New(ggcrregistry.WithBlobHandler(ggcrregistry.NewDiskBlobHandler(blobs)), ggcrregistry.Logger(log.New(io.Discard, "", 0)))}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the registry: %w", err)
	}
	r.Host = l.Addr().String()
	r.serve(l)
	return r, nil
}

// ServeTLS serves the same registry over HTTPS too, with cert (for 127.0.0.1), at TLSHost.
func (r *Registry) ServeTLS(cert tls.Certificate) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening for the registry over HTTPS: %w", err)
	}
	r.TLSHost = l.Addr().String()
	r.serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	return nil
}

func (r *Registry) serve(l net.Listener) {
	server := &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second}
	r.servers = append(r.servers, server)
	go func() { r.done <- server.Serve(l) }()
}

// Stop ends the registry and its connections. Not Shutdown: a client's transport may hold a
// connection it dialled ahead and never used, which Shutdown waits on for seconds.
func (r *Registry) Stop() error {
	var err error
	for _, server := range r.servers {
		err = errors.Join(err, server.Close())
	}
	for range r.servers {
		if serveErr := <-r.done; !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(err, serveErr)
		}
	}
	return err
}

// Reference is where the registry holds an image named image ("docker.io/library/redis:7.0",
// "example.com/redis-operator:v0.2.0"): the repository keeps the name's registry as its first
// path element, which is the layout containerd's mirror configuration asks for with
// override_path (see Mirror).
func (r *Registry) Reference(image string) (name.Reference, error) {
	return ReferenceIn(r.Host, image)
}

// ReferenceIn is Reference for the registry at registryHost, from a process that did not start
// it (make run-bundle: the cluster says where its registry is, see LocalRegistryHosting).
func ReferenceIn(registryHost, image string) (name.Reference, error) {
	_, host, err := parse(image)
	if err != nil {
		return nil, err
	}
	return referenceAt(registryHost, host, image)
}

// MirrorReference is where the registry holds a mirror's copy of image under path instead of
// the name's host (<path>/<repository>), which containerd pulls with node.Containerd.MirrorAt.
func (r *Registry) MirrorReference(path, image string) (name.Reference, error) {
	return referenceAt(r.Host, path, image)
}

func referenceAt(registryHost, path, image string) (name.Reference, error) {
	ref, _, err := parse(image)
	if err != nil {
		return nil, err
	}
	local := fmt.Sprintf("%s/%s/%s", registryHost, path, ref.Context().RepositoryStr())
	switch ref := ref.(type) {
	case name.Digest:
		return name.NewDigest(local+"@"+ref.DigestStr(), name.Insecure)
	default:
		return name.NewTag(local+":"+ref.Identifier(), name.Insecure)
	}
}

// HostOf is the registry host of an image's name as containerd names it: the directory of its
// hosts.toml, and the first path element under which the registry keeps it.
func HostOf(image string) (string, error) {
	_, host, err := parse(image)
	return host, err
}

func parse(image string) (name.Reference, string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, "", fmt.Errorf("parsing image name %q: %w", image, err)
	}
	host := ref.Context().RegistryStr()
	if host == name.DefaultRegistry {
		host = "docker.io" // the name containerd gives Docker Hub (go-containerregistry's is index.docker.io)
	}
	return ref, host, nil
}

// Push stores image under the name image and returns its digest.
func (r *Registry) Push(ctx context.Context, image string, img v1.Image) (v1.Hash, error) {
	ref, err := r.Reference(image)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", image, err)
	}
	return img.Digest()
}

// PushAll stores each image under its name and returns the registry hosts those names name
// (sorted), the ones containerd must mirror to this registry.
func (r *Registry) PushAll(ctx context.Context, images map[string]v1.Image) ([]string, error) {
	hosts := map[string]bool{}
	for image, img := range images {
		if _, err := r.Push(ctx, image, img); err != nil {
			return nil, err
		}
		host, err := HostOf(image)
		if err != nil {
			return nil, err
		}
		hosts[host] = true
	}
	return slices.Sorted(maps.Keys(hosts)), nil
}

// Pull reads the image stored under the name image.
func (r *Registry) Pull(ctx context.Context, image string) (v1.Image, error) {
	ref, err := r.Reference(image)
	if err != nil {
		return nil, err
	}
	return remote.Image(ref, remote.WithContext(ctx))
}
