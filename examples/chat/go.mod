module github.com/gustws/gust/examples/chat

// A module of its own: with -nats the chat joins a cluster through
// cluster/nats, whose NATS dependencies stay out of the core module.
go 1.26.0

replace (
	github.com/gustws/gust => ../../
	github.com/gustws/gust/cluster/nats => ../../cluster/nats
)

require (
	github.com/gustws/gust v0.0.0-00010101000000-000000000000
	github.com/gustws/gust/cluster/nats v0.0.0-00010101000000-000000000000
	github.com/nats-io/nats-server/v2 v2.15.2
	github.com/nats-io/nats.go v1.55.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
