module github.com/gustws/gust/benchmark

go 1.26

replace github.com/gustws/gust => ../

require (
	github.com/coder/websocket v1.8.15
	github.com/gobwas/ws v1.5.0
	github.com/gorilla/websocket v1.5.3
	github.com/gustws/gust v0.0.0-00010101000000-000000000000
	github.com/klauspost/compress v1.20.3
	github.com/lesismal/llib v1.2.2
	github.com/lesismal/nbio v1.6.8
	github.com/lxzan/gws v1.8.9
)

require (
	github.com/dolthub/maphash v0.1.0 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	golang.org/x/crypto v0.0.0-20210513122933-cd7d49e622d5 // indirect
	golang.org/x/sys v0.0.0-20210423082822-04245dca01da // indirect
)
