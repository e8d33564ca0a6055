package hip

import (
	"strings"
	"testing"

	"github.com/attnc/attnc/codegen/hip/isa"
)

// The MFMA target is the tiling's rule: an f16/bf16 prefill on 16-row
// items (MFMA's M) without MFMA misses it; one on 8-row items (its 16-row
// schedule did not fit the LDS), a decode, or an f32 prefill is not
// held to it. Every row is held to zero spills.
func TestCheckISAMFMARule(t *testing.T) {
	clean := isa.Kernel{Name: "k", Arch: "gfx942", VGPRs: 64, SGPRs: 80, Opcodes: map[string]int{"v_add_f32": 1}}
	row := func(role, dtype string, rows int) ISARow {
		return ISARow{Role: role, DType: dtype, ItemRows: rows, Kernel: clean}
	}
	for _, c := range []struct {
		r    ISARow
		miss bool
	}{
		{row("prefill", "f16", 16), true},
		{row("prefill", "bf16", 16), true},
		{row("prefill", "f16", 8), false},
		{row("decode", "f16", 16), false},
		{row("prefill", "f32", 16), false},
	} {
		got := CheckISA([]ISARow{c.r})
		if miss := len(got) == 1 && strings.Contains(got[0], "has MFMA"); miss != c.miss || len(got) > 1 {
			t.Errorf("%s %s on %d-row items: %q, want a missed MFMA target: %v", c.r.Role, c.r.DType, c.r.ItemRows, got, c.miss)
		}
	}
	spill := row("decode", "f16", 16)
	spill.SGPRSpills = 2
	if got := CheckISA([]ISARow{spill}); len(got) != 1 || !strings.Contains(got[0], "zero SGPR spills") {
		t.Errorf("2 SGPR spills: %q, want the SGPR target missed", got)
	}
	mfma := row("prefill", "f16", 16)
	mfma.Opcodes = map[string]int{"v_mfma_f32_16x16x16_f16": 4}
	if got := CheckISA([]ISARow{mfma}); len(got) != 0 {
		t.Errorf("f16 prefill with MFMA: %q, want every target met", got)
	}
}
