// Package backup moves RDB snapshots between Redis nodes and object storage: a backup streams a
// node's snapshot to S3 while hashing it; a restore fetches one, checks its hash and lays it out
// in a data directory before Redis starts. Nothing is held whole in memory.
package backup

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// ErrStorage means the object store refused a request or did not answer; the message says
// what it said (wrong credentials, no such bucket, ...).
var ErrStorage = errors.New("object storage")

// PartSize is the size of each part of a multipart upload, and so the memory one upload
// holds.
const PartSize = 16 << 20

// Credentials of an S3 destination, from its Secret.
type Credentials struct {
	AccessKeyID, SecretAccessKey string
}

// Store is one S3 bucket.
type Store struct {
	client *s3.Client
	bucket string
}

// NewStore connects to the destination's bucket; caPEM, when set, is the only CA its endpoint's
// certificate may chain to.
func NewStore(dest cachev1.S3Destination, creds Credentials, caPEM []byte) (*Store, error) {
	httpClient := &http.Client{Timeout: 0}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = time.Minute
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("the CA bundle holds no PEM certificate")
		}
		transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	httpClient.Transport = transport
	region := dest.Region
	if region == "" {
		region = "us-east-1"
	}
	opts := s3.Options{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, ""),
		HTTPClient:  httpClient,
		// Checksums only where S3 requires them: S3-compatible stores differ in which of the
		// newer checksum headers they take. Ours is the SHA-256 recorded in the RedisBackup.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
	}
	if dest.Endpoint != "" {
		opts.BaseEndpoint = aws.String(strings.TrimSuffix(dest.Endpoint, "/"))
		opts.UsePathStyle = true
	}
	return &Store{client: s3.New(opts), bucket: dest.Bucket}, nil
}

// ObjectKey is where a backup is stored in its bucket: <prefix>/<namespace>/<cluster>/<backup>.rdb.
func ObjectKey(prefix, namespace, cluster, backup string) string {
	return strings.TrimPrefix(path.Join(prefix, namespace, cluster, backup+".rdb"), "/")
}

// ShardObjectKey is where one shard's snapshot of a backup in cluster mode is stored:
// <prefix>/<namespace>/<cluster>/<backup>/<shard>.rdb, under ShardsPrefix.
func ShardObjectKey(prefix, namespace, cluster, backup, shard string) string {
	return strings.TrimPrefix(path.Join(prefix, namespace, cluster, backup, shard+".rdb"), "/")
}

// ShardsPrefix is the key prefix a backup's shards share: <prefix>/<namespace>/<cluster>/<backup>/.
func ShardsPrefix(prefix, namespace, cluster, backup string) string {
	return strings.TrimPrefix(path.Join(prefix, namespace, cluster, backup), "/") + "/"
}

// Location names an object as the RedisBackup's status does: s3://<bucket>/<key>.
func (s *Store) Location(key string) string { return "s3://" + s.bucket + "/" + key }

// KeyOf is the key of a location of this store's bucket.
func (s *Store) KeyOf(location string) (string, error) {
	key, ok := strings.CutPrefix(location, "s3://"+s.bucket+"/")
	if !ok || key == "" {
		return "", fmt.Errorf("location %s is not in bucket %s", location, s.bucket)
	}
	return key, nil
}

// Upload stores what r yields under key, in parts of PartSize, and returns its size. The object
// exists only once all of it is stored: a failed upload is aborted and leaves nothing.
func (s *Store) Upload(ctx context.Context, key string, r io.Reader) (int64, error) {
	buf := make([]byte, PartSize)
	n, err := io.ReadFull(r, buf)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// Small enough for one request.
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key,
			Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n))})
		return int64(n), storageError("storing "+s.Location(key), err)
	}
	if err != nil {
		return 0, err
	}
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return 0, storageError("storing "+s.Location(key), err)
	}
	size, err := s.uploadParts(ctx, key, created.UploadId, buf, n, r)
	if err != nil {
		// The context may be what failed: abort on one of our own.
		abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = s.client.AbortMultipartUpload(abortCtx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: created.UploadId})
		return size, err
	}
	return size, nil
}

func (s *Store) uploadParts(ctx context.Context, key string, uploadID *string, buf []byte, n int, r io.Reader) (int64, error) {
	var parts []types.CompletedPart
	var size int64
	for number := int32(1); n > 0; number++ {
		out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: &key, UploadId: uploadID,
			PartNumber: aws.Int32(number), Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n))})
		if err != nil {
			return size, storageError(fmt.Sprintf("storing part %d of %s", number, s.Location(key)), err)
		}
		size += int64(n)
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(number)})
		n, err = io.ReadFull(r, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return size, err
		}
	}
	_, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	return size, storageError("completing "+s.Location(key), err)
}

// Download writes the object at key to w.
func (s *Store) Download(ctx context.Context, key string, w io.Writer) (int64, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return 0, storageError("reading "+s.Location(key), err)
	}
	defer out.Body.Close()
	n, err := io.Copy(w, out.Body)
	if err != nil {
		return n, fmt.Errorf("%w: reading %s: %w", ErrStorage, s.Location(key), err)
	}
	return n, nil
}

// Delete removes the object at key; an object that is already gone is no error.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	return storageError("deleting "+s.Location(key), err)
}

// CheckBucket says whether the bucket exists and the credentials may use it.
func (s *Store) CheckBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	return storageError("bucket "+s.bucket, err)
}

// storageError says what the store answered, in its own words (its error code), or that it did
// not answer.
func storageError(what string, err error) error {
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		msg := api.ErrorMessage()
		switch api.ErrorCode() {
		case "NoSuchBucket":
			msg = "the bucket does not exist"
		case "NotFound", "NoSuchKey":
			msg = "not found"
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden":
			msg = "the store refused the credentials: " + msg
		}
		return fmt.Errorf("%w: %s: %s (%s)", ErrStorage, what, strings.TrimSpace(msg), api.ErrorCode())
	}
	return fmt.Errorf("%w: %s: %w", ErrStorage, what, err)
}
