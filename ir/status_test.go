package ir

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestStatusTableInREADME checks the table of status codes in docs/abi.md
// against Statuses, row for row: the code, <PREFIX>_<NAME> and the message.
func TestStatusTableInREADME(t *testing.T) {
	data, err := os.ReadFile("../docs/abi.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\s*\\| (-?\\d+) \\| `([A-Z0-9_]+)` \\| (.*) \\|\\s*$")
	want := append([]ErrorCode{{Code: StatusOK, Name: "ok", Msg: StatusOKMessage}}, Statuses...)
	rows := row.FindAllStringSubmatch(string(data), -1)
	if len(rows) != len(want) {
		t.Fatalf("docs/abi.md lists %d status codes, the table has %d", len(rows), len(want))
	}
	for i, r := range rows {
		code, _ := strconv.Atoi(r[1])
		w := want[i]
		if code != w.Code || r[2] != strings.ToUpper(w.Name) || r[3] != w.Msg {
			t.Errorf("docs/abi.md row %d is | %s | `%s` | %s |, want | %d | `%s` | %s |", i, r[1], r[2], r[3], w.Code, strings.ToUpper(w.Name), w.Msg)
		}
	}
}
