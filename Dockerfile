# Build: docker build -t trimtab .
# The image runs `trimtab serve`; mount a profile at /etc/trimtab/profile.yaml
# (deploy/kubernetes does it with a ConfigMap).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/trimtab ./cmd/trimtab

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/trimtab /usr/local/bin/trimtab
USER nonroot:nonroot
EXPOSE 8080 9002 9090
ENTRYPOINT ["/usr/local/bin/trimtab"]
CMD ["serve", "--config", "/etc/trimtab/profile.yaml"]
