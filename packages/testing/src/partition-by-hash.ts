import type postgres from "postgres";

/**
 * Recreates `tables` of `schema` as tables partitioned by hash of `column`, `partitions` each, with
 * their rows, columns, defaults, checks, indexes, foreign keys (to and from them) and triggers: a
 * schema with the rules of a distributed Postgres (Citus) on one server. Postgres refuses a primary
 * key or unique index of a partitioned table that does not include the partition column, so this
 * fails on any such key, naming it. Every table in one transaction.
 */
export async function partitionByHash(
  sql: postgres.Sql<Record<string, unknown>>,
  options: { schema: string; tables: readonly string[]; column: string; partitions: number },
): Promise<void> {
  const { schema, tables, column, partitions } = options;
  const q = (name: string) => `"${name.replace(/"/g, '""')}"`;
  await sql.begin(async (tx) => {
    await tx.unsafe(`set local search_path to ${q(schema)}`);
    const oids = (
      await tx<{ oid: number }[]>`
      select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = ${schema} and c.relname = any(${tables as string[]})`
    ).map((r) => r.oid);
    if (oids.length !== tables.length) throw new Error(`partitionByHash: not every one of ${tables.join(", ")} is a table of ${schema}`);
    // Foreign keys from or to the tables, and their triggers, go and come back on the new tables.
    const foreignKeys = await tx<{ table: string; name: string; definition: string }[]>`
      select c.conrelid::regclass::text as table, c.conname as name, pg_get_constraintdef(c.oid) as definition
      from pg_constraint c where c.contype = 'f' and (c.conrelid = any(${oids}) or c.confrelid = any(${oids}))`;
    const triggers = await tx<{ definition: string }[]>`
      select pg_get_triggerdef(t.oid) as definition from pg_trigger t where t.tgrelid = any(${oids}) and not t.tgisinternal`;
    for (const fk of foreignKeys) await tx.unsafe(`alter table ${fk.table} drop constraint ${q(fk.name)}`);

    for (const table of tables) {
      const old = `${table}_unpartitioned`;
      await tx.unsafe(`alter table ${q(table)} rename to ${q(old)}`);
      await tx.unsafe(`create table ${q(table)} (like ${q(old)} including all) partition by hash (${q(column)})`);
      for (let r = 0; r < partitions; r++) {
        await tx.unsafe(
          `create table ${q(`${table}_p${r}`)} partition of ${q(table)} for values with (modulus ${partitions}, remainder ${r})`,
        );
      }
      // A serial column's sequence belongs to the old table, and would go with it.
      const serials = await tx<{ column: string; sequence: string }[]>`
        select a.attname as column, pg_get_serial_sequence(${`${schema}.${old}`}, a.attname) as sequence
        from pg_attribute a where a.attrelid = ${`${schema}.${old}`}::regclass and a.attnum > 0 and not a.attisdropped
          and pg_get_serial_sequence(${`${schema}.${old}`}, a.attname) is not null`;
      for (const s of serials) await tx.unsafe(`alter sequence ${s.sequence} owned by ${q(table)}.${q(s.column)}`);
      await tx.unsafe(`insert into ${q(table)} select * from ${q(old)}`);
      await tx.unsafe(`drop table ${q(old)}`);
    }
    for (const fk of foreignKeys) await tx.unsafe(`alter table ${fk.table} add constraint ${q(fk.name)} ${fk.definition}`);
    for (const trigger of triggers) await tx.unsafe(trigger.definition);
  });
}
