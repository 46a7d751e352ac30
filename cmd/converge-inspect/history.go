package main

import (
	"strconv"

	"github.com/converge-go/converge/tables"
)

// earlierErrors is the marker the text view puts after a failing object's
// error when its row holds other recent errors (tables.RetryInfo.Errors):
// " (+N earlier)", the number of other distinct errors kept; "" when the
// error is the only one. --json shows them all, with their times and
// attempts.
func earlierErrors(r *tables.RetryInfo) string {
	if len(r.Errors) < 2 {
		return ""
	}
	return " (+" + strconv.Itoa(len(r.Errors)-1) + " earlier)"
}
