package status

import "errors"

// ErrMalformed is returned, wrapped, when decoding a status, kind or set from
// JSON or YAML fails because the input does not describe one.
var ErrMalformed = errors.New("malformed status")
