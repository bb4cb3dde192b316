module github.com/gustws/gust/metrics/prometheus

// go 1.26.0, where the core module declares 1.25: prometheus/client_golang
// v1.25, prometheus/common v0.72 and golang.org/x/sys declare go 1.26.0,
// and a module cannot declare less than its dependencies (go mod tidy
// raises it).
go 1.26.0

replace github.com/gustws/gust => ../../

require (
	github.com/gustws/gust v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.72.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
