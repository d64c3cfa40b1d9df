package localcluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ScorecardUntarImage is the image of the init container that unpacks the bundle in each test
// pod: operator-sdk runs busybox's tar there, which cannot be pulled here; this one is the
// static tar of test/images/untar, built here.
const ScorecardUntarImage = "example.com/scorecard-untar:local"

// ScorecardRun does what `operator-sdk scorecard` does: it reads the bundle's
// tests/scorecard/config.yaml, puts the bundle as a tarball in a ConfigMap, runs one pod per
// test (an init container unpacks the bundle to /bundle), reads each test's v1alpha3
// TestStatus from its pod's log through the API server (what `kubectl logs` reads), and
// deletes the pods.
type ScorecardRun struct {
	Cluster   *Cluster
	Namespace string
	// ServiceAccount the test pods run as; it is created with the rights the tests need in
	// Namespace when it does not exist.
	ServiceAccount string
	Timeout        time.Duration
}

// Run runs the tests that selector matches, stage by stage.
func (s ScorecardRun) Run(ctx context.Context, bundleDir string, selector labels.Selector) (scapiv1alpha3.TestList, error) {
	list := scapiv1alpha3.TestList{TypeMeta: metav1.TypeMeta{APIVersion: scapiv1alpha3.GroupVersion.String(), Kind: "TestList"}}
	raw, err := os.ReadFile(filepath.Join(bundleDir, "tests", "scorecard", "config.yaml"))
	if err != nil {
		return list, fmt.Errorf("reading the scorecard configuration: %w", err)
	}
	cfg := scapiv1alpha3.Configuration{}
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return list, fmt.Errorf("decoding the scorecard configuration: %w", err)
	}
	if err := s.ensureServiceAccount(ctx); err != nil {
		return list, err
	}
	// The pods' logs are read through the API server, as kubectl logs reads them.
	logs, err := kubernetes.NewForConfig(s.Cluster.AdminConfig)
	if err != nil {
		return list, err
	}
	tarball, err := tarBundle(bundleDir)
	if err != nil {
		return list, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "scorecard-bundle-", Namespace: s.Namespace},
		BinaryData: map[string][]byte{"bundle.tar.gz": tarball}}
	if err := s.Cluster.Client.Create(ctx, cm); err != nil {
		return list, fmt.Errorf("creating the bundle ConfigMap: %w", err)
	}
	defer func() { _ = s.Cluster.Client.Delete(context.WithoutCancel(ctx), cm) }()

	for _, stage := range cfg.Stages {
		var tests []scapiv1alpha3.TestConfiguration
		for _, t := range stage.Tests {
			if selector.Matches(labels.Set(t.Labels)) {
				tests = append(tests, t)
			}
		}
		results := make([]scapiv1alpha3.Test, len(tests))
		var wg sync.WaitGroup
		for i, t := range tests {
			run := func() {
				results[i] = scapiv1alpha3.Test{TypeMeta: metav1.TypeMeta{APIVersion: scapiv1alpha3.GroupVersion.String(), Kind: "Test"},
					Spec: t, Status: s.runTest(ctx, logs, cm.Name, t)}
			}
			if stage.Parallel {
				wg.Go(run)
			} else {
				run()
			}
		}
		wg.Wait()
		list.Items = append(list.Items, results...)
	}
	return list, nil
}

// runTest runs one test's pod to completion and reads its result from the pod's log.
func (s ScorecardRun) runTest(ctx context.Context, logs kubernetes.Interface, bundleConfigMap string, t scapiv1alpha3.TestConfiguration) scapiv1alpha3.TestStatus {
	name := t.Labels["test"]
	if name == "" && len(t.Entrypoint) > 0 {
		name = t.Entrypoint[len(t.Entrypoint)-1]
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "scorecard-test-", Namespace: s.Namespace,
			Labels: map[string]string{"app": "scorecard-test"}},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: s.ServiceAccount,
			SecurityContext:    RestrictedPodSecurity(),
			InitContainers: []corev1.Container{{
				Name: "scorecard-untar", Image: ScorecardUntarImage, SecurityContext: RestrictedContainerSecurity(),
				Command:      []string{"tar", "xzf", "/scorecard/bundle.tar.gz", "-C", "/bundle"},
				VolumeMounts: []corev1.VolumeMount{{Name: "scorecard-bundle", MountPath: "/scorecard"}, {Name: "scorecard-untar", MountPath: "/bundle"}},
			}},
			Containers: []corev1.Container{{
				Name: "scorecard-test", Image: t.Image, SecurityContext: RestrictedContainerSecurity(),
				Command: t.Entrypoint[:1],
				// Pods here share the host's filesystem: the test binary is told where its
				// /bundle mount is laid out (the node maps the path).
				Args:         append([]string{"--bundle=/bundle"}, t.Entrypoint[1:]...),
				Env:          []corev1.EnvVar{{Name: "SCORECARD_NAMESPACE", Value: s.Namespace}},
				VolumeMounts: []corev1.VolumeMount{{Name: "scorecard-untar", MountPath: "/bundle"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "scorecard-bundle", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: bundleConfigMap}}}},
				{Name: "scorecard-untar", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	c := s.Cluster.Client
	if err := c.Create(ctx, pod); err != nil {
		return errorStatus(name, fmt.Errorf("creating the test pod: %w", err))
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), pod) }()
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return errorStatus(name, err)
		}
		if got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed {
			break
		}
		if time.Now().After(deadline) {
			return errorStatus(name, fmt.Errorf("the test pod %s did not finish within %s: %s", pod.Name, timeout, got.Status.Message))
		}
		select {
		case <-ctx.Done():
			return errorStatus(name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	out, err := logs.CoreV1().Pods(s.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "scorecard-test"}).DoRaw(ctx)
	if err != nil {
		return errorStatus(name, fmt.Errorf("reading the test pod's log: %w", err))
	}
	status := scapiv1alpha3.TestStatus{}
	if err := json.Unmarshal(lastJSON(out), &status); err != nil {
		return errorStatus(name, fmt.Errorf("the test pod's log holds no TestStatus: %w: %s", err, out))
	}
	return status
}

// lastJSON is the last line of the log that starts a JSON object: the test's result.
func lastJSON(logs []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(logs), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if bytes.HasPrefix(bytes.TrimSpace(lines[i]), []byte("{")) {
			return lines[i]
		}
	}
	return logs
}

func errorStatus(name string, err error) scapiv1alpha3.TestStatus {
	return scapiv1alpha3.TestStatus{Results: []scapiv1alpha3.TestResult{{Name: name, State: scapiv1alpha3.ErrorState, Errors: []string{err.Error()}}}}
}

// ensureServiceAccount gives the test pods an identity that may create and read RedisClusters
// and read what they make, in the namespace only.
func (s ScorecardRun) ensureServiceAccount(ctx context.Context) error {
	c := s.Cluster.Client
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: s.ServiceAccount, Namespace: s.Namespace}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: s.ServiceAccount, Namespace: s.Namespace}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"cache.example.com"}, Resources: []string{"redisclusters"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "services", "configmaps"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: s.ServiceAccount, Namespace: s.Namespace},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: s.ServiceAccount, Namespace: s.Namespace}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: s.ServiceAccount}},
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// tarBundle is the bundle directory as a gzipped tarball, as the scorecard mounts it.
func tarBundle(dir string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, path)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(dir, path)
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(raw))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(raw); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PrintScorecard prints results as operator-sdk scorecard does (-o text).
func PrintScorecard(list scapiv1alpha3.TestList) string {
	var b strings.Builder
	for _, t := range list.Items {
		b.WriteString(strings.Repeat("-", 80) + "\n")
		fmt.Fprintf(&b, "Image:      %s\n", t.Spec.Image)
		fmt.Fprintf(&b, "Entrypoint: %v\n", t.Spec.Entrypoint)
		b.WriteString("Labels:\n")
		keys := make([]string, 0, len(t.Spec.Labels))
		for k := range t.Spec.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "\t%q:%q\n", k, t.Spec.Labels[k])
		}
		b.WriteString("Results:\n")
		for _, r := range t.Status.Results {
			fmt.Fprintf(&b, "\tName: %s\n\tState: %s\n", r.Name, r.State)
			for _, s := range r.Suggestions {
				fmt.Fprintf(&b, "\tSuggestions:\n\t\t%s\n", s)
			}
			for _, e := range r.Errors {
				fmt.Fprintf(&b, "\tErrors:\n\t\t%s\n", e)
			}
			if r.Log != "" {
				fmt.Fprintf(&b, "\tLog:\n\t\t%s\n", strings.ReplaceAll(strings.TrimSpace(r.Log), "\n", "\n\t\t"))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ScorecardPassed is true when every result of every test passed.
func ScorecardPassed(list scapiv1alpha3.TestList) bool {
	for _, t := range list.Items {
		if len(t.Status.Results) == 0 {
			return false
		}
		for _, r := range t.Status.Results {
			if r.State != scapiv1alpha3.PassState {
				return false
			}
		}
	}
	return true
}
