//! `#[derive(Versioned)]`: the `update_by_id*` methods of optimistic locking for a struct
//! with one integer version field, built on `distlock_optimistic::VersionedUpdate`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, LitStr, Path, Type};

/// What `#[versioned(…)]` on the struct says.
struct StructArgs {
    table: Option<LitStr>,
    schema: Option<LitStr>,
    key: Option<LitStr>,
    krate: Option<Path>,
}

/// How one field takes part in the update.
enum Role {
    Version,
    Skip,
    Set,
}

pub(crate) fn derive(input: DeriveInput) -> syn::Result<TokenStream> {
    let args = struct_args(&input)?;
    let table = args.table.ok_or_else(|| {
        syn::Error::new_spanned(&input.ident, "#[derive(Versioned)] needs #[versioned(table = \"…\")] on the struct")
    })?;
    let key_name = args.key.as_ref().map_or_else(|| "id".to_owned(), LitStr::value);
    let krate = args.krate.map_or_else(|| quote!(::distlock_optimistic), |path| quote!(#path));
    let fields = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(fields) => &fields.named,
            _ => return Err(syn::Error::new_spanned(&input.ident, "#[derive(Versioned)] needs named fields")),
        },
        _ => return Err(syn::Error::new_spanned(&input.ident, "#[derive(Versioned)] works on structs only")),
    };

    let mut version = None;
    let mut key = None;
    let mut sets = Vec::new();
    for field in fields {
        let Some(ident) = &field.ident else { continue };
        let column = ident.to_string().trim_start_matches("r#").to_owned();
        match field_role(field)? {
            Role::Skip => {}
            Role::Version => {
                if version.is_some() {
                    return Err(syn::Error::new_spanned(ident, "only one field can be #[versioned(version)]"));
                }
                if !is_integer(&field.ty) {
                    return Err(syn::Error::new_spanned(&field.ty, "the version field must be i16, i32 or i64"));
                }
                version = Some((ident, column));
            }
            Role::Set if column == key_name => key = Some((ident, column)),
            Role::Set if is_option(&field.ty) => {
                sets.push(quote!(.set_some(#column, ::core::option::Option::as_ref(&self.#ident))));
            }
            Role::Set => sets.push(quote!(.set(#column, &self.#ident))),
        }
    }
    let (version_ident, version_column) = version.ok_or_else(|| {
        syn::Error::new_spanned(
            &input.ident,
            "#[derive(Versioned)] needs one integer field marked #[versioned(version)]",
        )
    })?;
    let (key_ident, key_column) = key.ok_or_else(|| {
        let span = args.key.as_ref().map_or_else(|| input.ident.span(), LitStr::span);
        syn::Error::new(span, format!("no field named `{key_name}` to use as the key (set `key = \"…\"`)"))
    })?;
    let schema = args.schema.map(|schema| quote!(.schema(#schema)));

    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #name #type_generics #where_clause {
            /// The versioned update of this row: the key, the expected version and every
            /// field to set (fields that are `None` left out). Add `.fenced(…)` or
            /// `.force()` and call `execute`.
            pub fn versioned_update(&self) -> #krate::VersionedUpdate {
                #krate::VersionedUpdate::table(#table)
                    #schema
                    .key(#key_column, &self.#key_ident)
                    .version(#version_column, self.#version_ident)
                    #(#sets)*
            }

            /// Updates the row while its version is still this struct's, and returns the
            /// new version; `StaleRecord` otherwise.
            pub async fn update_by_id<'e, A>(&self, executor: A) -> ::core::result::Result<i64, #krate::OptimisticError>
            where
                A: #krate::sqlx::Acquire<'e, Database = #krate::sqlx::Postgres>,
            {
                self.versioned_update().execute(executor).await
            }

            /// As `update_by_id`, returning the updated row.
            pub async fn update_by_id_returning<'e, T, A>(&self, executor: A) -> ::core::result::Result<T, #krate::OptimisticError>
            where
                A: #krate::sqlx::Acquire<'e, Database = #krate::sqlx::Postgres>,
                T: for<'r> #krate::sqlx::FromRow<'r, #krate::sqlx::postgres::PgRow>,
            {
                self.versioned_update().execute_returning(executor).await
            }

            /// Updates the row whatever its version (still bumping it), and returns the new
            /// version.
            pub async fn update_by_id_force<'e, A>(&self, executor: A) -> ::core::result::Result<i64, #krate::OptimisticError>
            where
                A: #krate::sqlx::Acquire<'e, Database = #krate::sqlx::Postgres>,
            {
                self.versioned_update().force().execute(executor).await
            }

            /// As `update_by_id_force`, returning the updated row.
            pub async fn update_by_id_force_returning<'e, T, A>(&self, executor: A) -> ::core::result::Result<T, #krate::OptimisticError>
            where
                A: #krate::sqlx::Acquire<'e, Database = #krate::sqlx::Postgres>,
                T: for<'r> #krate::sqlx::FromRow<'r, #krate::sqlx::postgres::PgRow>,
            {
                self.versioned_update().force().execute_returning(executor).await
            }
        }
    })
}

fn struct_args(input: &DeriveInput) -> syn::Result<StructArgs> {
    let mut args = StructArgs { table: None, schema: None, key: None, krate: None };
    for attr in input.attrs.iter().filter(|attr| attr.path().is_ident("versioned")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("table") {
                args.table = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("schema") {
                args.schema = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("key") {
                args.key = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("crate") {
                let path: LitStr = meta.value()?.parse()?;
                args.krate = Some(path.parse()?);
            } else {
                return Err(meta.error("expected `table`, `schema`, `key` or `crate`"));
            }
            Ok(())
        })?;
    }
    Ok(args)
}

fn field_role(field: &syn::Field) -> syn::Result<Role> {
    let mut role = Role::Set;
    for attr in field.attrs.iter().filter(|attr| attr.path().is_ident("versioned")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("version") {
                role = Role::Version;
            } else if meta.path.is_ident("skip") {
                role = Role::Skip;
            } else {
                return Err(meta.error("expected `version` or `skip`"));
            }
            Ok(())
        })?;
    }
    Ok(role)
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    }
}

fn is_integer(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|segment| {
        segment.arguments.is_none() && ["i16", "i32", "i64"].iter().any(|name| segment.ident == name)
    })
}

fn is_option(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|segment| segment.ident == "Option")
}
