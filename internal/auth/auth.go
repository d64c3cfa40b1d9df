// Package auth carries out the live credential changes on one Redis node, for either
// mode: the default user's passwords (given beside the ones the node has, removed once their
// time is up), the operator's own user, the application users (ACL SETUSER, and deletion of
// the users not listed), and the TLS certificate (loaded again from its files). It decides nothing: the controller's phases say which node needs
// what and when (the rotation's rules are theirs); no password goes into argv, a log line or
// an error message.
package auth

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
)

// PasswordNode is what the password commands need of a node (redis.Node has it).
type PasswordNode interface {
	Masterauth(ctx context.Context) (string, error)
	PasswordHashes(ctx context.Context, user string) ([]string, error)
	AddPassword(ctx context.Context, password string) error
	RemovePassword(ctx context.Context, password string) error
}

// UserNode is what the user commands need of a node (redis.Node has it).
type UserNode interface {
	SetUser(ctx context.Context, name string, args []string) error
	DeleteUser(ctx context.Context, name string) error
	Users(ctx context.Context) ([]string, error)
}

// TakesPassword is true when the node's default user takes password and the node gives it to
// its primary (masterauth): GivePassword would change nothing.
func TakesPassword(ctx context.Context, n PasswordNode, password string) (bool, error) {
	masterauth, err := n.Masterauth(ctx)
	if err != nil || masterauth != password {
		return false, err
	}
	hashes, err := n.PasswordHashes(ctx, "default")
	if err != nil {
		return false, err
	}
	return slices.Contains(hashes, resources.PasswordHash(password)), nil
}

// GivePassword has the node take password for the default user, beside the ones it takes; it
// sends nothing when the node takes it already.
func GivePassword(ctx context.Context, n PasswordNode, password string) error {
	takes, err := TakesPassword(ctx, n, password)
	if err != nil || takes {
		return err
	}
	return n.AddPassword(ctx, password)
}

// RemovePasswords has the node refuse each of passwords for the default user.
func RemovePasswords(ctx context.Context, n PasswordNode, passwords []string) error {
	for _, p := range passwords {
		if err := n.RemovePassword(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// RepairLogin is what a node that refuses the operator's own login is given once reached as
// the default user: the current password, and the operator's user.
func RepairLogin(password string, operator resources.User) func(context.Context, redis.Node) error {
	return func(ctx context.Context, n redis.Node) error {
		if err := n.AddPassword(ctx, password); err != nil {
			return err
		}
		return SetUser(ctx, n, operator)
	}
}

// SetUser defines the user u on the node as u says, whatever it had.
func SetUser(ctx context.Context, n UserNode, u resources.User) error {
	return n.SetUser(ctx, u.Name, u.SetUserArgs())
}

// ApplyUsers defines each user on the node and deletes the users it has that are not listed
// (never default, nor the operator's own). It returns the lines Redis took and, named by user,
// those it refused (a refused user is deleted: nothing half-made is left).
func ApplyUsers(ctx context.Context, n UserNode, users []resources.User) (accepted []string, rejected []error, err error) {
	names := []string{"default", resources.OperatorUserName}
	for _, u := range users {
		names = append(names, u.Name)
		err := SetUser(ctx, n, u)
		switch {
		case errors.Is(err, redis.ErrRejected):
			rejected = append(rejected, fmt.Errorf("user %s: %w", u.Name, err))
			_ = n.DeleteUser(ctx, u.Name)
		case err != nil:
			return nil, nil, err
		default:
			accepted = append(accepted, u.Line())
		}
	}
	have, err := n.Users(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, name := range have {
		if !slices.Contains(names, name) {
			if err := n.DeleteUser(ctx, name); err != nil {
				return nil, nil, err
			}
		}
	}
	return accepted, rejected, nil
}

// TLSNode is what LoadCertificate needs of a node (redis.Node has it).
type TLSNode interface {
	ReloadTLS(ctx context.Context) error
}

// LoadCertificate has the node n (at addr) read its TLS files again, and says whether it then
// serves leaf (loaded) and whether it served another before (changed). cfg is how the operator
// checks a node's certificate; timeout bounds each handshake.
func LoadCertificate(ctx context.Context, n TLSNode, addr string, cfg *tls.Config, leaf []byte, timeout time.Duration) (loaded, changed bool, err error) {
	before, _ := redis.ServedCertificate(ctx, addr, cfg, timeout)
	if err := n.ReloadTLS(ctx); err != nil {
		return false, false, fmt.Errorf("loading its TLS files: %w", err)
	}
	after, err := redis.ServedCertificate(ctx, addr, cfg, timeout)
	if err != nil {
		return false, false, fmt.Errorf("reading the certificate it serves: %w", err)
	}
	if !bytes.Equal(after.Raw, leaf) {
		return false, false, nil // its files are not the Secret's yet
	}
	return true, before == nil || !bytes.Equal(before.Raw, leaf), nil
}
