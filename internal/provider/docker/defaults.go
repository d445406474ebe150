package docker

import "github.com/limbs-dev/limbs/internal/sandbox"

// WithDefaults returns spec with the limits the provider applies where
// spec leaves them zero, so that the control plane can show what is in
// force (control.Defaulter).
func (p *Provider) WithDefaults(spec sandbox.Spec) sandbox.Spec { return withDefaults(spec) }
