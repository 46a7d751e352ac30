package drift

import (
	"context"
	"errors"
	"testing"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/tables"
)

func checkOf(inSync bool, err error) func(context.Context, statedb.ReadTxn, statedb.Revision, string) (bool, error) {
	return func(context.Context, statedb.ReadTxn, statedb.Revision, string) (bool, error) { return inSync, err }
}

// Run turns the check's answer into a verdict and whether Update follows:
// a drift is repaired, unless report-only and the key's last update did
// not fail.
func TestRunVerdicts(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		inSync             bool
		err                error
		reportOnly, unappl bool
		want               Verdict
		update             bool
	}{
		{true, nil, false, false, InSync, false},
		{false, nil, false, false, Drifted, true},
		{false, nil, true, false, Drifted, false},
		{false, nil, true, true, Drifted, true},
		{false, boom, false, false, NotChecked, false},
	} {
		v, update, err := New(checkOf(c.inSync, c.err), c.reportOnly).Run(context.Background(), nil, 1, "a", c.unappl)
		if v != c.want || update != c.update || err != c.err {
			t.Errorf("%+v: Run = %v, %v, %v", c, v, update, err)
		}
	}
	var d *Check[string]
	if d.Applies(true, false) || d.Failing() {
		t.Error("a nil check applies")
	}
	if d := New(checkOf(true, nil), false); !d.Applies(true, false) || d.Applies(true, true) || d.Applies(false, false) {
		t.Error("Applies: want refreshes that are not deletes only")
	}
}

// settle runs Settled and, if due, Record for key.
func settle(d *Check[string], key string, o Outcome) int64 {
	repaired, row := d.Settled(o)
	if row.Due() {
		d.Record(key, row, o.Err)
	}
	return repaired
}

// A repair counts one unless Update reported its count; a drift left
// counts none.
func TestSettledCountsRepairs(t *testing.T) {
	d := New(checkOf(false, nil), false)
	if n := settle(d, "a", Outcome{Verdict: Drifted, Applies: true}); n != 1 {
		t.Errorf("a repair counted %d, want 1", n)
	}
	if n := settle(d, "a", Outcome{Verdict: Drifted, Applies: true, Repaired: 4}); n != 4 {
		t.Errorf("a repair Update counted 4 of counted %d", n)
	}
	if n := settle(d, "a", Outcome{Verdict: Drifted, Applies: true, Err: errors.New("update failed")}); n != 0 {
		t.Errorf("a failed repair counted %d", n)
	}
	d.SetReportOnly(true)
	if n := settle(d, "a", Outcome{Verdict: Drifted, Applies: true}); n != 0 || d.Rows().Detected() != 1 {
		t.Errorf("a drift left counted %d repaired, %d detected; want 0, 1", n, d.Rows().Detected())
	}
}

// In report-only mode a drift left shows its key drifted until another
// outcome for it; a failed update makes the key unapplied until it
// applies; AppendRows hands the changes out once.
func TestReportOnlyRows(t *testing.T) {
	d := New(checkOf(false, nil), true)
	display := func(k string) string { return "<" + k + ">" }
	settle(d, "a", Outcome{Verdict: Drifted, Applies: true})
	settle(d, "b", Outcome{Verdict: Drifted, Applies: true})
	rows := AppendRows[struct{}](d.Rows(), "r", nil, nil, display)
	if len(rows) != 2 || !rows[0].Drifted || rows[0].Reconciler != "r" {
		t.Fatalf("rows = %+v, want a and b drifted", rows)
	}
	if rows := AppendRows[struct{}](d.Rows(), "r", nil, nil, display); len(rows) != 0 {
		t.Errorf("rows handed out again: %+v", rows)
	}
	settle(d, "a", Outcome{Verdict: InSync, Applies: true})
	settle(d, "b", Outcome{Err: errors.New("update failed")}) // a new version failed
	if !d.Failing() || !d.Unapplied("b") || d.Unapplied("a") {
		t.Errorf("Failing %v, Unapplied(b) %v, Unapplied(a) %v; want true, true, false", d.Failing(), d.Unapplied("b"), d.Unapplied("a"))
	}
	got := map[string]bool{}
	for _, r := range AppendRows[struct{}](d.Rows(), "r", nil, nil, display) {
		got[r.Key] = r.Drifted
	}
	if len(got) != 2 || got["<a>"] || got["<b>"] {
		t.Errorf("rows = %v, want a and b no longer drifted", got)
	}
	// A failed check leaves what was known; a delete that applies ends
	// the failure.
	settle(d, "b", Outcome{Applies: true, Err: errors.New("check failed")})
	if !d.Unapplied("b") {
		t.Error("a failed check ended the failure")
	}
	settle(d, "b", Outcome{Delete: true})
	if d.Unapplied("b") || d.Failing() {
		t.Error("a delete did not end the failure")
	}
	if d.Rows().Detected() != 2 {
		t.Errorf("detected %d, want 2", d.Rows().Detected())
	}
}

// A key whose failure row changes keeps it: a drift that ends removes no
// failure, and a drift found replaces the removal of the failure before.
func TestAppendRowsKeepsFailureRows(t *testing.T) {
	d := New(checkOf(false, nil), true)
	settle(d, "a", Outcome{Verdict: Drifted, Applies: true})
	settle(d, "b", Outcome{Verdict: Drifted, Applies: true})
	outdated := map[string]int{"a": 1, "b": 2}
	retries := []tables.RetryInfo{{Key: "a", Attempts: 3}, {Key: "b"}}
	rows := AppendRows(d.Rows(), "r", retries, outdated, func(k string) string { return k })
	if len(rows) != 2 || rows[0].Attempts != 3 || rows[0].Drifted || !rows[1].Drifted {
		t.Errorf("rows = %+v; want a's failure kept, b's removal replaced by its drift", rows)
	}
}
