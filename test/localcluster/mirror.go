package localcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/org/redis-operator/test/registry"
)

// mirrorPath is where the cluster's registry keeps the mirror of a disconnected cluster:
// <mirrorPath>/<host>/<repository>, by digest only.
const mirrorPath = "mirror"

// PullOnlyFromMirror makes the nodes pull as a disconnected cluster does (an OpenShift
// ImageDigestMirrorSet, or containerd's hosts.toml): images, each named by its digest
// (example.com/redis-operator@sha256:...), are copied to a mirror that holds them by digest
// only; the node's pulls of every name under their registries go to that mirror alone, where
// a name by tag is not found; and the node forgets the copies of these images it pulled
// before, so that their next pods pull them from the mirror. It returns the names the node
// forgot, and what points the node's pulls back to the cluster's registry (the mirror's copies
// stay, under names nothing else uses).
func (c *Cluster) PullOnlyFromMirror(ctx context.Context, images map[string]v1.Image) (forgot []string, restore func() error, err error) {
	if c.real == nil {
		return nil, nil, errors.New("the cluster has no node of the harness's")
	}
	hosts, digests := map[string]bool{}, []string{}
	for image, img := range images {
		ref, err := name.NewDigest(image)
		if err != nil {
			return nil, nil, fmt.Errorf("%s is not named by its digest: %w", image, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, nil, err
		}
		if digest.String() != ref.DigestStr() {
			return nil, nil, fmt.Errorf("%s names another image than the one given (%s)", image, digest)
		}
		host, err := registry.HostOf(image)
		if err != nil {
			return nil, nil, err
		}
		mirrored, err := c.real.registry.MirrorReference(mirrorPath+"/"+host, image)
		if err != nil {
			return nil, nil, err
		}
		if err := remote.Write(mirrored, img, remote.WithContext(ctx)); err != nil {
			return nil, nil, fmt.Errorf("copying %s to the mirror: %w", image, err)
		}
		hosts[host], digests = true, append(digests, digest.String())
	}
	var restores []func() error
	restore = func() error {
		var errs []error
		for _, r := range restores {
			errs = append(errs, r())
		}
		return errors.Join(errs...)
	}
	gone := map[string]bool{}
	for _, n := range c.real.nodes {
		for _, host := range slices.Sorted(maps.Keys(hosts)) {
			back, err := n.Containerd.MirrorAt(host, mirrorPath+"/"+host)
			if err != nil {
				return nil, nil, errors.Join(err, restore())
			}
			restores = append(restores, back)
		}
		names, err := n.Containerd.ForgetImages(ctx, digests...)
		if err != nil {
			return nil, nil, errors.Join(err, restore())
		}
		for _, name := range names {
			gone[name] = true
		}
	}
	return slices.Sorted(maps.Keys(gone)), restore, nil
}

// NodeImages are the names of the images the nodes hold, any of them.
func (c *Cluster) NodeImages(ctx context.Context) ([]string, error) {
	if c.real == nil {
		return nil, errors.New("the cluster has no node of the harness's")
	}
	held := map[string]bool{}
	for _, n := range c.real.nodes {
		names, err := n.Containerd.Images(ctx)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			held[name] = true
		}
	}
	return slices.Sorted(maps.Keys(held)), nil
}
