package docker_test

import (
	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/provider/docker"
)

// The control plane drives this provider through its Provider interface.
var _ control.Provider = (*docker.Provider)(nil)
