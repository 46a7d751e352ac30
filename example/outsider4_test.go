//go:build linux

package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The second probe as a local attacker (issue 47): each test pins one of
// its findings, as the documented behaviour the finding broke.

// A template check costs time linear in the template's length: a PUT of
// a template of the largest size, all placeholders (131,072 of them), is
// answered at once, and so is one whose mistake is its last placeholder.
// (It took minutes when each placeholder counted the lines before it.)
func TestATemplateOfManyPlaceholdersIsCheckedAtOnce(t *testing.T) {
	a := startApp(t, testConfig(), nil)
	a.waitReconciled()
	many := strings.Repeat("{{name}}", maxContentLen/len("{{name}}"))
	for _, c := range []struct {
		text string
		code int
	}{
		{many, http.StatusOK},
		{many[:len(many)-len("{{name}}")] + "{{nam}}", http.StatusBadRequest},
	} {
		began := time.Now()
		code, body := a.do(http.MethodPut, "/templates/banner", strings.NewReader(c.text))
		took := time.Since(began)
		require.Equal(t, c.code, code, body)
		// Linear: milliseconds, seconds under -race on a busy machine;
		// quadratic: minutes.
		require.Less(t, took, 10*time.Second, "a PUT of a template of %d placeholders", len(c.text)/8)
		if c.code == http.StatusBadRequest {
			require.Contains(t, body, `line 1, column 1048569: unknown placeholder \"{{nam}}\"`)
		}
	}
}
