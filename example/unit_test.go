package main

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

func TestEmbeddedFiles(t *testing.T) {
	set, err := parseFiles("files.yaml", embeddedFiles)
	require.NoError(t, err)
	var names []string
	for _, f := range set.Files {
		names = append(names, f.Name)
		if f.Name == "secret.conf" {
			require.Equal(t, Mode(0o600), f.Mode)
			require.Empty(t, f.Template)
		} else {
			require.Equal(t, defaultMode, f.Mode)
			require.Equal(t, "banner", f.Template)
		}
	}
	require.Equal(t, initialNames, names)
	require.Len(t, set.Templates, 1)
	require.Equal(t, "banner", set.Templates[0].Name)
}

func TestRender(t *testing.T) {
	db := statedb.New()
	templates, err := newTemplatesTable(db)
	require.NoError(t, err)
	wtxn := db.WriteTxn(templates)
	templates.Insert(wtxn, &Template{Name: "t", Text: "[{{name}}] {{content}} {{other}}"})
	templates.Insert(wtxn, &Template{Name: "huge", Text: strings.Repeat("{{content}}", 2)})
	wtxn.Commit()
	txn := db.ReadTxn()

	got, err := render(txn, templates, &File{Name: "a", Content: "x", Template: "t"})
	require.NoError(t, err)
	require.Equal(t, "[a] x {{other}}", got)
	got, err = render(txn, templates, &File{Name: "a", Content: "verbatim {{name}}"})
	require.NoError(t, err)
	require.Equal(t, "verbatim {{name}}", got)

	_, err = render(txn, templates, &File{Name: "a", Template: "missing"})
	require.ErrorIs(t, err, errNoTemplate)
	require.True(t, reconciler.IsTerminal(err))
	_, err = render(txn, templates, &File{Name: "a", Content: strings.Repeat("x", maxContentLen/2+1), Template: "huge"})
	require.ErrorContains(t, err, "more than the limit")
	require.True(t, reconciler.IsTerminal(err))

	for _, bad := range []string{"", "a/b", `a\b`, "a\nb", strings.Repeat("n", maxNameLen+1)} {
		require.ErrorIs(t, validateTemplateName(bad), errInvalidTemplateName, bad)
	}
	require.NoError(t, validateTemplateName("banner"))
}

func TestFileEncoding(t *testing.T) {
	f := &File{Name: "a", Content: "x\n", Mode: 0o600, Status: status.Error(errors.New("disk full"))}
	require.Equal(t, []string{"Name", "Mode", "Size", "Template", "Status"}, f.TableHeader())
	row := f.TableRow()
	require.Equal(t, []string{"a", "0600", "2", ""}, row[:4])
	require.Contains(t, row[4], "disk full")

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
	for _, bad := range []string{"", ".", "..", "../x", "/etc/passwd", `a\b`, "a/b", "a\x00b", "a\nb", stateDir, "\xff", "a\xc3"} {
		require.ErrorIs(t, validateName(bad), errInvalidName, bad)
	}
}

// A template's text may hold {{name}} and {{content}}, and no other
// "{{"; errors say where.
func TestParseTemplate(t *testing.T) {
	for _, ok := range []string{"", "plain", "{{name}}: {{content}}", "{{content}}{{content}}", "a } b }} c", "ünï {{name}}"} {
		require.NoError(t, parseTemplate(ok), ok)
	}
	for text, msg := range map[string]string{
		"{{other}}":            `line 1, column 1: unknown placeholder "{{other}}"`,
		"x\nyé {{name}} {{ }}": `line 2, column 13: unknown placeholder "{{ }}"`,
		"{{name":               `line 1, column 1: "{{" is not closed by "}}"`,
		"{{{{name}}":           `line 1, column 1: unknown placeholder "{{{{name}}"`,
	} {
		err := parseTemplate(text)
		require.ErrorIs(t, err, errInvalidTemplate, text)
		require.ErrorContains(t, err, msg, text)
	}
}

// The log limiter lets a message about a key through once per interval,
// by its clock, and at once again after forget.
func TestLogLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := logLimiter{every: time.Minute, now: func() time.Time { return now }}
	require.True(t, l.allow("motd", "in the way"))
	require.False(t, l.allow("motd", "in the way"))
	require.True(t, l.allow("motd", "other reason"), "another message")
	require.True(t, l.allow("hello.txt", "in the way"), "another file")
	now = now.Add(time.Minute - time.Nanosecond)
	require.False(t, l.allow("motd", "in the way"))
	now = now.Add(time.Nanosecond)
	require.True(t, l.allow("motd", "in the way"), "a minute later")
	require.False(t, l.allow("motd", "in the way"))
	require.True(t, l.allow("hello.txt", "in the way"), "a minute later")
	l.forget("motd")
	require.True(t, l.allow("motd", "in the way"), "after forget")
	require.False(t, l.allow("hello.txt", "in the way"), "forget is per file")
}

// A pair listener closed while its first Accept starts (a stop right
// after the start) ends that Accept and waits for its goroutines, with no
// race between starting them and waiting for them.
func TestPairListenerCloseDuringFirstAccept(t *testing.T) {
	for range 50 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		b, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		p := newPairListener(a, b)
		accepted := make(chan error, 1)
		go func() {
			_, err := p.Accept()
			accepted <- err
		}()
		require.NoError(t, p.Close())
		select {
		case err := <-accepted:
			require.ErrorIs(t, err, net.ErrClosed)
		case <-time.After(waitFor):
			t.Fatal("Accept did not end on Close")
		}
		_, err = p.Accept()
		require.ErrorIs(t, err, net.ErrClosed)
	}
}
