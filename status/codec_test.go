package status_test

import (
	"encoding/json"

	yamlv3 "go.yaml.in/yaml/v3"
)

// codec is one encoding under test. Status and Set must work with
// encoding/json and with go.yaml.in/yaml/v3, the YAML library StateDB uses.
type codec struct {
	name      string
	marshal   func(any) ([]byte, error)
	unmarshal func([]byte, any) error
	// valid reports whether data is well-formed in the encoding, so that a
	// decode error on it must come from our decoder.
	valid func([]byte) bool
}

var (
	jsonCodec = codec{
		name:      "json",
		marshal:   json.Marshal,
		unmarshal: json.Unmarshal,
		valid:     json.Valid,
	}
	yamlCodec = codec{
		name:      "go.yaml.in/yaml/v3",
		marshal:   yamlv3.Marshal,
		unmarshal: yamlv3.Unmarshal,
		valid: func(data []byte) bool {
			var n yamlv3.Node
			return yamlv3.Unmarshal(data, &n) == nil
		},
	}
	allCodecs  = []codec{jsonCodec, yamlCodec}
	yamlCodecs = []codec{yamlCodec}
)
