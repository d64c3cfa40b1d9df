package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// failedGrace is how long a CSV may stay Failed before the wait gives up on it.
const failedGrace = 30 * time.Second

// runBundleChannel and runBundleOperatorGroup are the names operator-sdk run bundle gives.
const (
	runBundleChannel       = "operator-sdk-run-bundle"
	runBundleOperatorGroup = "operator-sdk-og"
)

// BundleRun does on the local cluster what `operator-sdk run bundle`, `run bundle-upgrade` and
// `cleanup` do: the bundle image, rendered with opm, is named by a catalog that a registry pod of
// the opm image serves (ServeCatalog), subscribed to with manual approval, and its InstallPlan
// approved; OLM unpacks the bundle image with a Job. It prints its steps as the SDK does.
type BundleRun struct {
	Cluster   *Cluster
	Namespace string
	Timeout   time.Duration
	Log       func(format string, args ...any)
}

func (r BundleRun) logf(format string, args ...any) {
	if r.Log != nil {
		r.Log(format, args...)
	}
}

func catalogName(pkg string) string { return pkg + "-catalog" }

func subscriptionName(csv string) string {
	return strings.NewReplacer(".", "-").Replace(csv) + "-sub"
}

// render renders the bundle image, pulled from the cluster's registry.
func (r BundleRun) render(ctx context.Context, image string) (declcfg.Bundle, error) {
	host, err := LocalRegistry(ctx, r.Cluster.Client)
	if err != nil {
		return declcfg.Bundle{}, err
	}
	r.logf("Creating a File-Based Catalog of the bundle %q", image)
	bundle, err := RenderBundleImage(ctx, filepath.Join(r.Cluster.Root, "bin", "opm"), host, image)
	if err != nil {
		return declcfg.Bundle{}, err
	}
	r.logf("Generated a valid File-Based Catalog of %s", bundle.Name)
	return bundle, nil
}

// Run installs the bundle image and waits until its CSV is Succeeded.
func (r BundleRun) Run(ctx context.Context, image string) error {
	bundle, err := r.render(ctx, image)
	if err != nil {
		return err
	}
	fbc := &declcfg.DeclarativeConfig{
		Packages: []declcfg.Package{{Schema: declcfg.SchemaPackage, Name: bundle.Package, DefaultChannel: runBundleChannel}},
		Channels: []declcfg.Channel{{Schema: declcfg.SchemaChannel, Package: bundle.Package, Name: runBundleChannel,
			Entries: []declcfg.ChannelEntry{{Name: bundle.Name}}}},
		Bundles: []declcfg.Bundle{bundle},
	}
	if err := r.serve(ctx, bundle.Package, fbc); err != nil {
		return err
	}
	if err := r.ensureOperatorGroup(ctx); err != nil {
		return err
	}
	sub := &operatorsv1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Name: subscriptionName(bundle.Name), Namespace: r.Namespace},
		Spec: &operatorsv1alpha1.SubscriptionSpec{
			CatalogSource: catalogName(bundle.Package), CatalogSourceNamespace: r.Namespace,
			Package: bundle.Package, Channel: runBundleChannel, StartingCSV: bundle.Name,
			InstallPlanApproval: operatorsv1alpha1.ApprovalManual,
		},
	}
	if err := r.Cluster.Client.Create(ctx, sub); err != nil {
		return fmt.Errorf("creating Subscription %s: %w", sub.Name, err)
	}
	r.logf("Created Subscription: %s", sub.Name)
	if err := r.approveInstallPlan(ctx, sub.Name, bundle.Name); err != nil {
		return err
	}
	return r.waitSucceeded(ctx, sub.Name, bundle.Name)
}

// Upgrade adds the bundle image to the catalog the package was installed from, replacing the
// installed CSV, and approves the upgrade.
func (r BundleRun) Upgrade(ctx context.Context, image string) error {
	bundle, err := r.render(ctx, image)
	if err != nil {
		return err
	}
	sub, err := r.subscription(ctx, bundle.Package)
	if err != nil {
		return err
	}
	installed := sub.Status.InstalledCSV
	if installed == "" {
		return fmt.Errorf("subscription %s has no installed CSV yet", sub.Name)
	}
	r.logf("Found Subscription %s; installed: %s", sub.Name, installed)
	fbc, err := r.servedCatalog(ctx, bundle.Package)
	if err != nil {
		return err
	}
	fbc.Bundles = append(fbc.Bundles, bundle)
	for i := range fbc.Channels {
		if fbc.Channels[i].Name == sub.Spec.Channel {
			fbc.Channels[i].Entries = append(fbc.Channels[i].Entries, declcfg.ChannelEntry{Name: bundle.Name, Replaces: installed})
		}
	}
	r.logf("Adding %s to the catalog, replacing %s", bundle.Name, installed)
	if err := r.serve(ctx, bundle.Package, fbc); err != nil {
		return err
	}
	if err := r.approveInstallPlan(ctx, sub.Name, bundle.Name); err != nil {
		return err
	}
	return r.waitSucceeded(ctx, sub.Name, bundle.Name)
}

// Cleanup removes what Run and Upgrade created for pkg: the Subscription, the CSVs, the
// CatalogSource and its registry pod, and the OperatorGroup Run created. Unlike the SDK it keeps
// the CRDs, and so every custom resource and the data behind it.
func (r BundleRun) Cleanup(ctx context.Context, pkg string) error {
	c := r.Cluster.Client
	subs := &operatorsv1alpha1.SubscriptionList{}
	if err := c.List(ctx, subs, client.InNamespace(r.Namespace)); err != nil {
		return err
	}
	for i := range subs.Items {
		sub := &subs.Items[i]
		if sub.Spec == nil || sub.Spec.Package != pkg {
			continue
		}
		if err := c.Delete(ctx, sub); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.logf("subscription %q deleted", sub.Name)
	}
	csvs := &operatorsv1alpha1.ClusterServiceVersionList{}
	if err := c.List(ctx, csvs, client.InNamespace(r.Namespace)); err != nil {
		return err
	}
	for i := range csvs.Items {
		csv := &csvs.Items[i]
		if strings.HasPrefix(csv.Name, pkg+".") && csv.Status.Reason != operatorsv1alpha1.CSVReasonCopied {
			if err := c.Delete(ctx, csv); client.IgnoreNotFound(err) != nil {
				return err
			}
			r.logf("clusterserviceversion %q deleted", csv.Name)
		}
	}
	cs := &operatorsv1alpha1.CatalogSource{ObjectMeta: metav1.ObjectMeta{Name: catalogName(pkg), Namespace: r.Namespace}}
	if err := c.Delete(ctx, cs); client.IgnoreNotFound(err) != nil {
		return err
	}
	r.logf("catalogsource %q deleted", cs.Name)
	if err := r.Cluster.removeOldRegistries(ctx, r.Namespace, catalogName(pkg), ""); err != nil {
		return err
	}
	og := &operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: runBundleOperatorGroup, Namespace: r.Namespace}}
	if err := c.Delete(ctx, og); err == nil {
		r.logf("operatorgroup %q deleted", og.Name)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	r.logf("Operator %q uninstalled", pkg)
	return nil
}

func (r BundleRun) serve(ctx context.Context, pkg string, fbc *declcfg.DeclarativeConfig) error {
	pod, err := r.Cluster.ServeCatalog(ctx, r.Namespace, catalogName(pkg), fbc)
	if err != nil {
		return err
	}
	r.logf("Created registry pod: %s", pod.Name)
	r.logf("Created CatalogSource: %s", catalogName(pkg))
	return nil
}

// servedCatalog reads back the catalog the registry pod of pkg serves.
func (r BundleRun) servedCatalog(ctx context.Context, pkg string) (*declcfg.DeclarativeConfig, error) {
	cms := &corev1.ConfigMapList{}
	if err := r.Cluster.Client.List(ctx, cms, client.InNamespace(r.Namespace), client.MatchingLabels{labelCatalog: catalogName(pkg)}); err != nil {
		return nil, err
	}
	if len(cms.Items) != 1 {
		return nil, fmt.Errorf("found %d catalogs of %s in %s; run bundle first", len(cms.Items), pkg, r.Namespace)
	}
	return declcfg.LoadReader(bytes.NewReader([]byte(cms.Items[0].Data["catalog.yaml"])))
}

func (r BundleRun) subscription(ctx context.Context, pkg string) (*operatorsv1alpha1.Subscription, error) {
	subs := &operatorsv1alpha1.SubscriptionList{}
	if err := r.Cluster.Client.List(ctx, subs, client.InNamespace(r.Namespace)); err != nil {
		return nil, err
	}
	for i := range subs.Items {
		if s := &subs.Items[i]; s.Spec != nil && s.Spec.Package == pkg {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no Subscription to %s in %s; run bundle first", pkg, r.Namespace)
}

// ensureOperatorGroup creates an OperatorGroup for this namespace alone (OwnNamespace) unless
// the namespace has one.
func (r BundleRun) ensureOperatorGroup(ctx context.Context) error {
	ogs := &operatorsv1.OperatorGroupList{}
	if err := r.Cluster.Client.List(ctx, ogs, client.InNamespace(r.Namespace)); err != nil {
		return err
	}
	if len(ogs.Items) > 0 {
		r.logf("Using existing OperatorGroup %q", ogs.Items[0].Name)
		return nil
	}
	og := &operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: runBundleOperatorGroup, Namespace: r.Namespace},
		Spec: operatorsv1.OperatorGroupSpec{TargetNamespaces: []string{r.Namespace}}}
	if err := r.Cluster.Client.Create(ctx, og); err != nil {
		return fmt.Errorf("creating OperatorGroup: %w", err)
	}
	r.logf("OperatorGroup %q created", og.Name)
	return nil
}

// approveInstallPlan waits for the InstallPlan the Subscription names, for csv, and approves it.
// OLM may replace a plan before it runs (a new resolution); the Subscription then names the new
// one, which waitSucceeded approves too.
func (r BundleRun) approveInstallPlan(ctx context.Context, sub, csv string) error {
	return r.poll(ctx, fmt.Sprintf("an InstallPlan for %s", csv), func() (bool, error) {
		return r.approveCurrentPlan(ctx, sub, csv)
	})
}

// approveCurrentPlan approves the Subscription's current InstallPlan when it installs csv, and
// says whether that plan is approved.
func (r BundleRun) approveCurrentPlan(ctx context.Context, subName, csv string) (bool, error) {
	sub := &operatorsv1alpha1.Subscription{}
	if err := r.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: subName}, sub); err != nil {
		return false, err
	}
	ref := sub.Status.InstallPlanRef
	if ref == nil {
		return false, nil
	}
	ip := &operatorsv1alpha1.InstallPlan{}
	if err := r.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, ip); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !slices.Contains(ip.Spec.ClusterServiceVersionNames, csv) {
		return false, nil
	}
	if !ip.Spec.Approved {
		ip.Spec.Approved = true
		if err := r.Cluster.Client.Update(ctx, ip); err != nil {
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return false, err
		}
		r.logf("Approved InstallPlan %s for the Subscription: %s", ip.Name, subName)
	}
	return true, nil
}

// waitSucceeded waits until the CSV reaches Succeeded, printing its phases; Failed ends it.
func (r BundleRun) waitSucceeded(ctx context.Context, sub, name string) error {
	r.logf("Waiting for ClusterServiceVersion %q to reach 'Succeeded' phase", r.Namespace+"/"+name)
	last := operatorsv1alpha1.ClusterServiceVersionPhase("")
	var failedSince time.Time
	err := r.poll(ctx, fmt.Sprintf("ClusterServiceVersion %s to succeed", name), func() (bool, error) {
		csv := &operatorsv1alpha1.ClusterServiceVersion{}
		err := r.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, csv)
		if apierrors.IsNotFound(err) {
			if _, err := r.approveCurrentPlan(ctx, sub, name); err != nil {
				return false, err
			}
			if last == "" {
				r.logf("  Waiting for ClusterServiceVersion %q to appear", r.Namespace+"/"+name)
				last = "Absent"
			}
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if csv.Status.Phase != last {
			last = csv.Status.Phase
			r.logf("  Found ClusterServiceVersion %q phase: %s", r.Namespace+"/"+name, last)
			failedSince = time.Time{}
		}
		if last == operatorsv1alpha1.CSVPhaseFailed {
			// OLM may fail a CSV for a moment during an upgrade (RequirementsNotMet while the
			// old version's RBAC goes) and then install it: only a lasting failure ends the wait.
			if failedSince.IsZero() {
				failedSince = time.Now()
			}
			if time.Since(failedSince) > failedGrace {
				return false, fmt.Errorf("ClusterServiceVersion %s failed: %s: %s", name, csv.Status.Reason, csv.Status.Message)
			}
		}
		return last == operatorsv1alpha1.CSVPhaseSucceeded, nil
	})
	if err == nil {
		r.logf("OLM has successfully installed %q", name)
	}
	return err
}

func (r BundleRun) poll(ctx context.Context, what string, done func() (bool, error)) error {
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
