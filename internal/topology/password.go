package topology

import "context"

// RotatePasswords gives the password current to every node of v that refused it but takes the
// one previous dials with: the password Secret changed under running nodes. The node keeps the
// previous one too, until RemovePassword: clients move to the new one without an error. The
// change is live, so no pod restarts for it. It returns the nodes it changed.
func RotatePasswords(ctx context.Context, v View, current string, previous Dialer) []string {
	var rotated []string
	for _, o := range v.AuthRefused() {
		n := previous(o.Addr)
		if _, err := n.Replication(ctx); err == nil {
			if err := n.AddPassword(ctx, current); err == nil {
				rotated = append(rotated, o.Name)
			}
		}
		n.Close()
	}
	return rotated
}
