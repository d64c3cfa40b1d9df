package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestChildrenAreComparedAgainWhenTheRedisClusterOrAChildChanges(t *testing.T) {
	var seen childrenSeen
	assert.False(t, seen.unchanged("1"), "never compared")
	seen.compared("1")
	assert.True(t, seen.unchanged("1"), "nothing changed since")
	assert.False(t, seen.unchanged("2"), "the RedisCluster changed")
	seen.compared("2")

	// A child that changes while nothing compares them
	seen.changed()
	assert.False(t, seen.unchanged("2"))

	// A child that changes during a comparison: the comparison may have read it before
	seen.changed()
	seen.compared("2")
	assert.False(t, seen.unchanged("2"), "the change during the last comparison is compared next time")
	seen.compared("2")
	assert.True(t, seen.unchanged("2"))
}
