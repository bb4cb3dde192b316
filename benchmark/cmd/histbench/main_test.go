package main

import (
	"encoding/json"
	"testing"
)

func TestParseFrame(t *testing.T) {
	cases := []struct {
		in   string
		want frame
	}{
		{`{"topic":"r","seq":41,"data":{"type":"message","room":"r","name":"bob","text":"live 3 1200","time":1}}`,
			frame{kind: kindMessage, seq: 41, name: []byte("bob"), text: []byte("live 3 1200")}},
		{`{"topic":"a \"b\"","seq":7,"data":{"type":"message","room":"a \"b\"","name":"x","text":"hi","time":1}}`,
			frame{kind: kindMessage, seq: 7, name: []byte("x"), text: []byte("hi")}},
		{`{"topic":"r","gap":12}`, frame{kind: kindGap, seq: 12}},
		{`{"topic":"r","gap":0,"epoch":"k3x9","reset":true}`, frame{kind: kindGap, epoch: "k3x9", reset: true}},
		{`{"topic":"r","recovered":41}`, frame{kind: kindRecovered, seq: 41}},
		{`{"topic":"r","recovered":41,"epoch":"k3x9"}`, frame{kind: kindRecovered, seq: 41, epoch: "k3x9"}},
		{`{"type":"join","room":"r","name":"idle-4","time":1}`, frame{kind: kindJoin, name: []byte("idle-4")}},
		{`{"type":"leave","room":"r","name":"idle-4","time":1}`, frame{kind: kindLeave, name: []byte("idle-4")}},
		{`{"type":"welcome","room":"r","name":"n","members":["n"],"time":1}`, frame{}},
	}
	for _, c := range cases {
		got := parseFrame([]byte(c.in))
		if got.kind != c.want.kind || got.seq != c.want.seq || got.epoch != c.want.epoch || got.reset != c.want.reset ||
			string(got.name) != string(c.want.name) || string(got.text) != string(c.want.text) {
			t.Errorf("parseFrame(%s) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestPosition(t *testing.T) {
	if got := position("", 950); got != "950" {
		t.Errorf(`position("", 950) = %q`, got)
	}
	if got := position("k3x9", 950); got != "k3x9:950" {
		t.Errorf(`position("k3x9", 950) = %q`, got)
	}
}

func TestParseGCLine(t *testing.T) {
	g, ok := parseGCLine("gc 12 @3.402s 1%: 0.021+1.2+0.003 ms clock, 0.042+0.1/0.9/0.3+0.006 ms cpu, 310->312->155 MB, 320 MB goal, 0 MB stacks, 0 MB globals, 2 P")
	if !ok || g.n != 12 || g.liveMiB != 155 {
		t.Errorf("parseGCLine = %+v, %v", g, ok)
	}
	if _, ok := parseGCLine("2026/11/28 17:40:30 chat on http://127.0.0.1:8080"); ok {
		t.Error("a log line taken for a gctrace line")
	}
}

func TestHistoryText(t *testing.T) {
	b := historyText(7, 2000)
	var v struct{ Text string }
	if err := json.Unmarshal(b, &v); err != nil || len(v.Text) != 2000 {
		t.Errorf("historyText(7, 2000): %d bytes of text, %v", len(v.Text), err)
	}
}

func TestPercentile(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(i + 1)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := percentile(v, c.q); got != c.want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := sortedCountBelowOrAt(v, 50); got != 50 {
		t.Errorf("sortedCountBelowOrAt(1..100, 50) = %d", got)
	}
}
