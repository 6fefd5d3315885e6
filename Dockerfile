# syntax=docker/dockerfile:1
# One image for every process; the Kubernetes manifests pick the process with the command:
#   node dist/ledger.js          (likewise dist/hold.js, dist/notification.js, dist/gateway.js)
#   node dist/migrate.js         (the migration Job)
#   node dist/ledger-cli.js      (the operator CLI: accounts, keys)
# The services run as compiled JavaScript (scripts/build.mjs bundles each entry point): no
# TypeScript loader and no compile at start. The build stage typechecks the same sources first.

FROM node:20-slim AS manifests
# pnpm through npm, as scripts/bootstrap.sh does: corepack cannot verify pnpm on every machine.
RUN npm install --global --no-audit --no-fund pnpm@10.34.9
WORKDIR /app
# Manifests first, so the dependency layer is rebuilt only when a lockfile or package.json changes.
# Every workspace package's package.json must be here, or --frozen-lockfile refuses the install
# (deploy/validate.test.ts checks this list against pnpm-workspace.yaml).
COPY package.json pnpm-lock.yaml pnpm-workspace.yaml ./
# pnpm applies these patches of dependencies while installing (package.json, pnpm.patchedDependencies).
COPY patches/ patches/
COPY proto/package.json proto/
COPY packages/common/package.json packages/common/
COPY packages/connect-fast/package.json packages/connect-fast/
COPY packages/testing/package.json packages/testing/
COPY packages/webhooks/package.json packages/webhooks/
COPY packages/client/package.json packages/client/
COPY services/ledger/package.json services/ledger/
COPY services/hold/package.json services/hold/
COPY services/notification/package.json services/notification/
COPY gateway/package.json gateway/
COPY e2e/package.json e2e/
COPY bench/package.json bench/

FROM manifests AS deps
# --prod=false: the compiler (typescript, esbuild) is a development dependency of the workspace.
RUN pnpm install --frozen-lockfile --prod=false

FROM deps AS build
COPY . .
# Fails the build on a type error rather than shipping it, then compiles dist/.
RUN pnpm typecheck && node scripts/build.mjs

# Production dependencies of the four services only, a fresh install on the same manifests
# (pruning the full install in place would have pnpm ask to remove node_modules). The bundles need
# little of it (the gateway's swagger-ui-dist files); the filter keeps out the test packages'
# dependencies (vitest, testcontainers, tsx through vite): about 46 MB.
FROM manifests AS prod-deps
RUN pnpm install --frozen-lockfile --prod --filter "@ledger/gateway..." --filter "@ledger/ledger-service..." --filter "@ledger/hold-service..." --filter "@ledger/notification-service..."

FROM node:20-slim AS runtime
ENV NODE_ENV=production
# At most two glibc malloc arenas instead of one per thread (up to 8 per core): node's helper
# threads each grew one under load. Less peak RSS per service in the bench, the same throughput
# (docs/decisions/malloc-arena-max.md; docs/operations.md#memory). Every process of the image
# gets it, whatever starts it; a pod's env may override it.
ENV MALLOC_ARENA_MAX=2
# Every malloc block of 128 KiB or more mapped on its own and returned to the system when freed.
# glibc otherwise raises this threshold after each large free, and later large buffers (socket
# reads, postgres.js messages, NATS batches) stay resident in its arenas: less peak RSS for the
# ledger and the gateway under 100-item batch calls, the same throughput
# (docs/decisions/malloc-mmap-threshold.md; docs/operations.md#memory). A pod's env may override it.
ENV MALLOC_MMAP_THRESHOLD_=131072
# Young generation of 8 MB semi-spaces instead of 16: less peak RSS per service process, at the
# same throughput apart, where no process is CPU-bound (docs/decisions/young-generation-size.md).
# A heap of at most 384 MB, under the pods' memory limits (512Mi, 768Mi in prod): below V8's
# default limit (a share of the machine's memory, not the pod's), V8 grows the old generation
# less between full collections, which keeps the ledger and the gateway under 150 MB peak with
# 100-item batches (150-155 MB without; docs/decisions/old-generation-growth.md). Both in
# docs/operations.md#memory. A pod's env may override them, and a flag on node's command line wins
# (the ledger's and the notification service's manifests give them 4 MB semi-spaces;
# deploy/base/ledger.yaml, deploy/base/notification.yaml).
ENV NODE_OPTIONS="--max-semi-space-size=8 --max-old-space-size=384"
WORKDIR /app
# Only what running needs: no pnpm, no sources to compile, no development dependencies. The node
# image's "node" user is uid 1000; a numeric USER lets Kubernetes check runAsNonRoot without
# reading /etc/passwd. Files stay root-owned: the processes only read them.
COPY --from=prod-deps --chown=root:root /app /app
COPY --from=build --chown=root:root /app/dist /app/dist
# What the compiled services read beside their sources: migrations, the OpenAPI document, the console.
COPY --from=build --chown=root:root /app/services/ledger/migrations /app/services/ledger/migrations
COPY --from=build --chown=root:root /app/services/hold/migrations /app/services/hold/migrations
COPY --from=build --chown=root:root /app/services/notification/migrations /app/services/notification/migrations
COPY --from=build --chown=root:root /app/gateway/openapi.yaml /app/gateway/openapi.yaml
COPY --from=build --chown=root:root /app/gateway/console /app/gateway/console
USER 1000:1000
EXPOSE 8080 8081 8082 8083
# V8's allocation-site pretenuring off, on node's command line (V8 flags other than the heap sizes
# are not allowed in NODE_OPTIONS): every service's manifest starts it the same way
# (docs/decisions/no-allocation-site-pretenuring.md).
CMD ["node", "--no-allocation-site-pretenuring", "dist/ledger.js"]
