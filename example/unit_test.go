package main

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/status"
)

func TestEmbeddedFiles(t *testing.T) {
	files, err := parseFiles("files.yaml", embeddedFiles)
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		if f.Name == "secret.conf" {
			require.Equal(t, Mode(0o600), f.Mode)
		} else {
			require.Equal(t, defaultMode, f.Mode)
		}
	}
	require.Equal(t, initialNames, names)
}

func TestFileEncoding(t *testing.T) {
	f := &File{Name: "a", Content: "x\n", Mode: 0o600, Status: status.Error(errors.New("disk full"))}
	require.Equal(t, []string{"Name", "Mode", "Size", "Status"}, f.TableHeader())
	row := f.TableRow()
	require.Equal(t, []string{"a", "0600", "2"}, row[:3])
	require.Contains(t, row[3], "disk full")

	data, err := json.Marshal(f)
	require.NoError(t, err)
	require.Contains(t, string(data), `"mode":"0600"`)
	var fromJSON File
	require.NoError(t, json.Unmarshal(data, &fromJSON))
	require.Equal(t, f.Mode, fromJSON.Mode)
	require.Equal(t, f.Status.Error, fromJSON.Status.Error)

	data, err = yaml.Marshal(f)
	require.NoError(t, err)
	require.Contains(t, string(data), `mode: "0600"`)
	var fromYAML File
	require.NoError(t, yaml.Unmarshal(data, &fromYAML))
	require.Equal(t, f.Content, fromYAML.Content)
	require.Equal(t, f.Mode, fromYAML.Mode)
	require.Equal(t, status.KindError, fromYAML.Status.Kind)

	for in, want := range map[string]Mode{"644": 0o644, "0644": 0o644, "0o755": 0o755, "0": 0} {
		got, err := parseMode(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "hello.txt", ".hidden", "a b", "ünïcode", "..x", "x.."} {
		require.NoError(t, validateName(ok), ok)
	}
	for _, bad := range []string{"", ".", "..", "../x", "/etc/passwd", `a\b`, "a/b", "a\x00b", "a\nb", stateDir} {
		require.ErrorIs(t, validateName(bad), errInvalidName, bad)
	}
}
