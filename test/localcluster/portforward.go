package localcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// DialPod connects to a pod's port through the API server, as kubectl port-forward does for
// each connection it accepts: a port-forward request to the pod, with an error stream and a data
// stream over SPDY. It reaches pods of any cluster the kubeconfig reaches, from anywhere.
func DialPod(ctx context.Context, cfg *rest.Config, namespace, pod string, port int) (net.Conn, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, err)
	}
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(port))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = errorStream.Close() // nothing is written to it
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	// The streams have no deadlines, which clients set: the caller gets one end of a pipe, and
	// the other is joined to the data stream until either side closes.
	local, remote := net.Pipe()
	go func() {
		defer func() { _ = conn.Close() }()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(data, remote); _ = data.Close(); done <- struct{}{} }()
		go func() { _, _ = io.Copy(remote, data); _ = remote.Close(); done <- struct{}{} }()
		go func() {
			// The kubelet reports a failed connection to the pod's port on the error stream.
			if msg, _ := io.ReadAll(errorStream); len(msg) > 0 {
				_ = remote.Close()
			}
		}()
		<-done
		_ = remote.Close()
		<-done
	}()
	return local, nil
}
