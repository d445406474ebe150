package control

import "github.com/limbs-dev/limbs/internal/secret"

// Secrets is the secret values of every sandbox, as the Plane masks them:
// for a program in the same process that relays what the Plane does not
// mask itself (the dashboard's terminal relays attach's frames).
func (s *Plane) Secrets() *secret.Set { return s.secrets }
