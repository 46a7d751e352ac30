package status

import "errors"

// ErrMalformed is returned, wrapped, for a kind that is none of the Kind
// constants or their names, and when decoding a [Set] from JSON or YAML
// fails. Other errors decoding a [Status] are the decoder's own.
var ErrMalformed = errors.New("malformed status")
