package s3server

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests in several packages run S3 servers at the same time, and some stop and restart theirs:
// each keeps its own objects, in its own directory, across a restart.
func TestServersRunningTogetherKeepTheirObjectsApartAndAcrossARestart(t *testing.T) {
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
	for _, s := range servers {
		t.Cleanup(s.Stop)
	}
	bucket := func(i int) string { return "bucket-" + string(rune('a'+i)) }
	for i, s := range servers {
		s.CreateBucket(t, bucket(i))
		for _, key := range []string{"one", "two", "three"} {
			_, err := s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket(i)), Key: aws.String(key),
				Body: strings.NewReader(bucket(i) + "/" + key)})
			require.NoError(t, err, "server %d stores %s", i, key)
		}
	}
	require.NoError(t, servers[0].Restart())
	for i, s := range servers {
		out, err := s.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket(i)), Key: aws.String("two")})
		require.NoError(t, err)
		body, err := io.ReadAll(out.Body)
		require.NoError(t, err)
		assert.Equal(t, bucket(i)+"/two", string(body))
		_, err = s.Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket(1 - i))})
		assert.Error(t, err, "server %d does not hold the other's bucket", i)
		// Its objects are files under its own directory.
		stored, err := os.ReadFile(filepath.Join(dirs[i], "data", bucket(i), "two"))
		require.NoError(t, err)
		assert.Equal(t, bucket(i)+"/two", string(stored))
	}
}
