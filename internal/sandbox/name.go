package sandbox

import (
	"fmt"
	"regexp"

	"github.com/limbs-dev/limbs/internal/wire"
)

// NameRule says in words what CheckName accepts, for error messages and
// docs.
const NameRule = "1 to 63 characters: letters, digits, '_', '.' and '-', starting with a letter or a digit"

// nameRE is NameRule. Names end up in terminals (`limbs sandbox ls`), in
// labels and in logs, so no control character, escape sequence or space
// may be part of one.
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// CheckName refuses a sandbox name outside NameRule with a bad request
// that quotes the name escaped.
func CheckName(name string) error {
	if nameRE.MatchString(name) {
		return nil
	}
	shown := name
	if len(shown) > 80 {
		shown = shown[:80] + "..."
	}
	return fmt.Errorf("sandbox name %q (%d bytes): a name is %s; pick another name: %w", shown, len(name), NameRule, wire.ErrBadRequest)
}
