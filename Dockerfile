# syntax=docker/dockerfile:1
# One image for every process; the Kubernetes manifests pick the process with the command:
#   node --import tsx services/ledger/src/main.ts        (likewise hold, notification)
#   node --import tsx gateway/src/main.ts
#   node --import tsx deploy/migrate.ts                  (the migration Job)
# The services run their TypeScript through tsx, as they do in development, so there is no
# separate compile step whose output could drift from what the tests ran.

FROM node:20-slim AS deps
# pnpm through npm, as scripts/bootstrap.sh does: corepack cannot verify pnpm on every machine.
RUN npm install --global --no-audit --no-fund pnpm@10.34.9
WORKDIR /app
# Manifests first, so the dependency layer is rebuilt only when a lockfile or package.json changes.
# Every workspace package's package.json must be here, or --frozen-lockfile refuses the install
# (deploy/validate.test.ts checks this list against pnpm-workspace.yaml).
COPY package.json pnpm-lock.yaml pnpm-workspace.yaml ./
COPY proto/package.json proto/
COPY packages/common/package.json packages/common/
COPY packages/testing/package.json packages/testing/
COPY packages/webhooks/package.json packages/webhooks/
COPY packages/client/package.json packages/client/
COPY services/ledger/package.json services/ledger/
COPY services/hold/package.json services/hold/
COPY services/notification/package.json services/notification/
COPY gateway/package.json gateway/
COPY bench/package.json bench/
# --prod=false: tsx, which runs the services, is a development dependency of the workspace.
RUN pnpm install --frozen-lockfile --prod=false

FROM deps AS build
COPY . .
# Fails the build on a type error rather than shipping it.
RUN pnpm typecheck

FROM node:20-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
# Only what running needs: no pnpm, no build cache. The node image's "node" user is uid 1000;
# a numeric USER lets Kubernetes check runAsNonRoot without reading /etc/passwd.
COPY --from=build --chown=root:root /app /app
USER 1000:1000
EXPOSE 8080 8081 8082 8083
# tsx caches compiled files under the system temp dir: the pods mount an emptyDir at /tmp because
# the root filesystem is read-only.
CMD ["node", "--import", "tsx", "services/ledger/src/main.ts"]
