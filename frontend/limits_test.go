package frontend

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTokenLimit checks the token count against the lexer's on specs with
// every kind of token, and that one token past MaxTokens is refused at
// that token's position before any parsing.
func TestTokenLimit(t *testing.T) {
	srcs := []string{
		"variant v {\n  heads qo = 8, kv = 8 // c\n  head_dim 64\n  mask expr(kv_pos <= q_pos && q_pos - kv_pos != 1.5e-3 || !(head >= 2))\n  score softcap(score, 30.0) - 1e+2 -.5\n}\n",
		"// only a comment\n\n\n",
		"variant v{heads qo=8,kv=8\r\nhead_dim 64}",
	}
	for _, src := range srcs {
		toks, err := specParser.Lex("x", strings.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, tk := range toks {
			if !tk.EOF() && (tk.Value == "\n" || strings.TrimSpace(tk.Value) != "" && !strings.HasPrefix(tk.Value, "//")) {
				want++
			}
		}
		if n, _, _ := scanTokens([]byte(src), 1<<30); n != want {
			t.Errorf("%q: counted %d tokens, the lexer makes %d", src, n, want)
		}
	}
	src := "variant v {\n  mask expr" + strings.Repeat("(", MaxTokens) + "x"
	start := time.Now()
	_, err := Parse("big.attn", []byte(src))
	if want := fmt.Sprintf("big.attn:2:%d: spec has more than %d tokens", len("  mask expr")+MaxTokens-5, MaxTokens); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %s...", err, want)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusing took %v", d)
	}
}
