package s3server

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests in several packages run S3 servers at the same time. weed mini names the sockets its
// services talk over by port, in /tmp: servers that shared them stored objects through each
// other's master and failed with InternalError ("volume not found").
func TestServersRunningTogetherKeepTheirObjectsApartAndLeaveNothingInTmp(t *testing.T) {
	ctx := context.Background()
	dirs := []string{t.TempDir(), t.TempDir()}
	servers := make([]*Server, len(dirs))
	errs := make(chan error, len(dirs))
	for i, dir := range dirs {
		go func() {
			var err error
			servers[i], err = StartIn(dir)
			errs <- err
		}()
	}
	for range dirs {
		require.NoError(t, <-errs)
	}
	for i, s := range servers {
		bucket := "bucket-" + string(rune('a'+i))
		s.CreateBucket(t, bucket)
		for _, key := range []string{"one", "two", "three"} {
			_, err := s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
				Body: strings.NewReader(bucket + "/" + key)})
			require.NoError(t, err, "server %d stores %s", i, key)
		}
	}
	for i, s := range servers {
		bucket := "bucket-" + string(rune('a'+i))
		out, err := s.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("two")})
		require.NoError(t, err)
		body, err := io.ReadAll(out.Body)
		require.NoError(t, err)
		assert.Equal(t, bucket+"/two", string(body))
		_, err = s.Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("bucket-" + string(rune('a'+1-i)))})
		assert.Error(t, err, "server %d does not hold the other's bucket", i)
	}
	// Other packages' servers may be running: look for these two's sockets, and for logs weed
	// would write to /tmp without -logdir.
	for _, s := range servers {
		s.Stop()
		for name, port := range s.grpcPorts {
			assert.NoFileExists(t, grpcSocket(name, port))
		}
	}
	logs, err := filepath.Glob("/tmp/weed.*")
	require.NoError(t, err)
	assert.Empty(t, logs)
}
