package status_test

import (
	"encoding/json"

	yamlv3 "go.yaml.in/yaml/v3"
	gopkgyaml "gopkg.in/yaml.v3"
)

// codec is one encoding under test. Status and Set must work with
// encoding/json and with both YAML v3 libraries: go.yaml.in/yaml/v3 (what
// StateDB uses) and its predecessor gopkg.in/yaml.v3.
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
	gopkgYAMLCodec = codec{
		name:      "gopkg.in/yaml.v3",
		marshal:   gopkgyaml.Marshal,
		unmarshal: gopkgyaml.Unmarshal,
		valid: func(data []byte) bool {
			var n gopkgyaml.Node
			return gopkgyaml.Unmarshal(data, &n) == nil
		},
	}
	allCodecs  = []codec{jsonCodec, yamlCodec, gopkgYAMLCodec}
	yamlCodecs = []codec{yamlCodec, gopkgYAMLCodec}
)
