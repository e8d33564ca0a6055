package conformance

import (
	"encoding/json"
	"flag"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/needtool"
)

var fuzzCaseFlag = flag.String("fuzz.case", "", "TestFuzzCase: run this case (the JSON a FuzzKernels failure prints after `case:`) in this process")

// TestFuzzCase replays one FuzzKernels case from its printed JSON
// (-fuzz.case), in this process, so that a failure found in CI (whose
// corpus file stays on the CI machine) can be rerun and debugged from its
// log alone. It does nothing without the flag.
func TestFuzzCase(t *testing.T) {
	t.Parallel()
	if *fuzzCaseFlag == "" {
		t.Skip("no -fuzz.case")
	}
	needtool.Check(t, cpurt.Tools())
	var fc fuzzCase
	if err := json.Unmarshal([]byte(*fuzzCaseFlag), &fc); err != nil {
		t.Fatalf("-fuzz.case: %v", err)
	}
	vs := fuzzVariants()
	if fc.V < 0 || fc.V >= len(vs) {
		t.Fatalf("-fuzz.case: variant %d of %d", fc.V, len(vs))
	}
	v := vs[fc.V]
	dir := t.TempDir()
	built, err := buildHostLevel(v, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer built.Lib.Close()
	s := fuzzSuite(t, v, built.Lib)
	res := runGuarded(s, fc)
	t.Logf("variant %s: status %d, pass %v, skip %v %s", v.Name, res.Status, res.Pass, res.Skip, res.Msg)
	if !res.Pass {
		t.Fail()
	}
}
