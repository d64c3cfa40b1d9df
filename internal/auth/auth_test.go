package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/redistest"
)

// Against a real redis-server: what each command leaves the node taking.
func TestPasswordsAreGivenBesideTheOthersAndRemovedOneByOne(t *testing.T) {
	ctx := context.Background()
	s, n := startNode(t, "old-password", "")

	require.NoError(t, auth.GivePassword(ctx, n, "new-password"))
	require.NoError(t, auth.GivePassword(ctx, n, "new-password"), "given again: nothing to do")
	takes, err := auth.TakesPassword(ctx, n, "new-password")
	require.NoError(t, err)
	assert.True(t, takes, "the node takes the new password")
	assert.NoError(t, loginWith(s.Addr(), "old-password"), "beside the old one")
	assert.NoError(t, loginWith(s.Addr(), "new-password"))

	require.NoError(t, auth.RemovePasswords(ctx, n, []string{"old-password"}))
	assert.Error(t, loginWith(s.Addr(), "old-password"), "the removed password")
	assert.NoError(t, loginWith(s.Addr(), "new-password"), "the current one stays")
}

// startNode runs a redis-server whose default user has password (and conf's other lines), and
// a connection to it that logs in with it; both end with the test.
func startNode(t *testing.T, password, conf string) (*redistest.Server, redis.Node) {
	t.Helper()
	s, err := redistest.StartIn(t.TempDir(), "node-0", "requirepass "+password+"\n"+conf)
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	n := redis.NewDialer(redis.Options{Password: password, Timeout: time.Second})(s.Addr())
	t.Cleanup(func() { _ = n.Close() })
	return s, n
}

// loginWith logs in to the node at addr as the default user with password, and asks it something.
func loginWith(addr, password string) error {
	n := redis.NewDialer(redis.Options{Password: password, Timeout: time.Second})(addr)
	defer n.Close()
	_, err := n.Stats(context.Background())
	return err
}

func TestUsersAreAppliedARefusedOneReportedAndTheUnlistedDeleted(t *testing.T) {
	ctx := context.Background()
	_, n := startNode(t, "pw", "user stale on nopass +@all ~*\n")

	app := resources.User{Name: "app", Password: "app-password", Rules: []string{"~app:*", "+get", "+set"}}
	bad := resources.User{Name: "bad", Password: "bad-password", Rules: []string{"+nosuchcommand"}}
	accepted, rejected, err := auth.ApplyUsers(ctx, n, []resources.User{app, bad})
	require.NoError(t, err)
	assert.Equal(t, []string{app.Line()}, accepted)
	require.Len(t, rejected, 1)
	assert.ErrorContains(t, rejected[0], "user bad")
	users, err := n.Users(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"default", "app"}, users, "the refused user and the unlisted one are gone")
}
