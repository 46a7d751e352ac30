package reconcilertest

import (
	"strconv"
	"strings"

	"github.com/converge-go/converge/tables"
)

// formatErrors renders the recent errors of a retries row for
// reconciler/retries --errors: " errors=[#1 TEXT | #3 TEXT]", oldest first,
// each with the attempt at which it last happened; " errors=[]" for none.
func formatErrors(errs []tables.ErrorRecord) string {
	var b strings.Builder
	b.WriteString(" errors=[")
	for i, e := range errs {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString("#" + strconv.Itoa(e.Attempt) + " " + e.Error)
	}
	b.WriteString("]")
	return b.String()
}
