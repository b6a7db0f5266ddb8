//go:build whatifengine

// The whatif-engine binary. It is a test binary (`go test -c -tags whatifengine`) because a synctest bubble, in
// which Kueue's timers run on a virtual clock, can only be started from a test: `synctest.Test` takes a
// *testing.T. It runs one replay:
//
//	whatif-engine -test.run=TestReplay -configuration kueue.yaml -input replay.json -output events.jsonl
package main

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"runtime/debug"
	"testing"
	"testing/synctest"

	"sigs.k8s.io/kueue/pkg/config"

	"konduktor.ai/whatif-engine/replay"
)

var (
	configuration = flag.String("configuration", "", "Kueue's Configuration (config.kueue.x-k8s.io/v1beta2), as `up` gives Kueue")
	input         = flag.String("input", "", "the replay's input: the config's objects and nodes, and the trace's jobs")
	output        = flag.String("output", "", "where to write the events, one JSON object a line")
)

func TestReplay(t *testing.T) {
	if *configuration == "" || *input == "" || *output == "" {
		t.Fatal("usage: whatif-engine -test.run=TestReplay -configuration FILE -input FILE -output FILE")
	}
	scheme := replay.Scheme()
	_, cfg, err := config.Load(scheme, *configuration)
	if err != nil {
		t.Fatalf("loading Kueue's Configuration: %v", err)
	}
	if errs := config.LoadAndValidateFeatureGates("", cfg.FeatureGates); len(errs) > 0 {
		t.Fatalf("Kueue's feature gates: %v", errs.ToAggregate())
	}
	if errs := config.Validate(&cfg, scheme); len(errs) > 0 {
		t.Fatalf("Kueue's Configuration: %v", errs.ToAggregate())
	}
	file, err := os.Open(*input)
	if err != nil {
		t.Fatal(err)
	}
	in, err := replay.ReadInput(file)
	file.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The replay keeps every object in memory and allocates briskly: collect garbage less often, but more often
	// again as the heap nears 1.5 GiB, so that a large replay stays within 2 GiB.
	debug.SetGCPercent(1000)
	debug.SetMemoryLimit(1536 << 20)
	var events []replay.Event
	synctest.Test(t, func(t *testing.T) {
		events, err = replay.Run(context.Background(), &cfg, in, os.Stderr)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(*output)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	encoder := json.NewEncoder(out)
	for _, event := range events {
		if err := encoder.Encode(event); err != nil {
			t.Fatal(err)
		}
	}
}
