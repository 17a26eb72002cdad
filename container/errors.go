package container

import (
	"fmt"
	"strconv"

	"github.com/containerd/errdefs"
)

// invalid is an InvalidArgument error naming the field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// quote quotes a value for an error message, cut to 64 bytes: a request may send
// megabytes.
func quote(v string) string {
	const max = 64
	if len(v) > max {
		return strconv.Quote(v[:max]) + "..."
	}
	return strconv.Quote(v)
}
