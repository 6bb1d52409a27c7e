//! The expansion: the function's body runs inside `LockManager::with_lock_opts`.

use proc_macro2::{Ident, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

use crate::args::{DurationArg, LockArgs, Mode, Renew, DEFAULT_TTL};
use crate::template::KeyTemplate;

pub(crate) fn lock(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let function: ItemFn = syn::parse2(item)?;
    let args = LockArgs::parse(attr)?;
    let sig = &function.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "#[distlock::lock] works on `async fn`s only: the lock is taken and released with `.await`",
        ));
    }
    let ReturnType::Type(_, return_type) = &sig.output else {
        return Err(syn::Error::new(
            sig.ident.span(),
            "a #[distlock::lock] fn must return `Result<T, E>` where `E: From<distlock::LockError>`",
        ));
    };
    if let Type::ImplTrait(impl_trait) = strip_parens(return_type) {
        // The lock's own outcome (`LockError::NotAcquired`…) has to leave the function
        // through the return type, and an opaque `impl Trait` gives it no way out.
        let bounds = impl_trait.bounds.to_token_stream().to_string();
        return Err(syn::Error::new(
            return_type.span(),
            format!(
                "a #[distlock::lock] fn must return `Result<T, E>` where `E: From<distlock::LockError>`, \
                 not `impl {bounds}`: write `Result<impl {bounds}, distlock::LockError>` (for an axum \
                 handler, with distlock's `axum` feature: a lock not acquired answers 409 Conflict)"
            ),
        ));
    }

    let template = KeyTemplate::parse(&args.key)?;
    let parameters = parameter_names(sig.inputs.iter());
    let mut key_args = Vec::new();
    for name in &template.placeholders {
        let Some(parameter) = parameters.iter().find(|ident| ident_text(ident) == name.trim_start_matches("r#")) else {
            let known = if parameters.is_empty() {
                "the function has no named parameters".to_owned()
            } else {
                let names: Vec<String> = parameters.iter().map(|ident| format!("`{ident}`")).collect();
                format!("its parameters are {}", names.join(", "))
            };
            return Err(syn::Error::new(
                args.key.span(),
                format!("unknown placeholder `{{{name}}}` in the key: no parameter named `{name}` ({known})"),
            ));
        };
        key_args.push(parameter.clone());
    }
    let format = &template.format;
    let key_span = args.key.span();
    let key = quote_spanned!(key_span=> ::std::format!(#format #(, #key_args)*));

    let ttl = match &args.ttl {
        Some(ttl) => duration_tokens(ttl),
        None => {
            let (secs, nanos) = (DEFAULT_TTL.as_secs(), DEFAULT_TTL.subsec_nanos());
            quote!(::distlock::__private::Duration::new(#secs, #nanos))
        }
    };
    let mut options = quote!(::distlock::LockOptions::new());
    if let Some(wait) = &args.wait {
        let wait = duration_tokens(wait);
        options.extend(quote!(.wait(#wait)));
    }
    if let Some(retry) = &args.retry {
        let retry = duration_tokens(retry);
        options.extend(quote!(.retry_interval(#retry)));
    }
    match &args.renew {
        Renew::Off => {}
        Renew::Auto => options.extend(quote!(.auto_renew())),
        Renew::Every(every) => {
            let every = duration_tokens(every);
            options.extend(quote!(.renew_every(#every)));
        }
    }

    let manager = &args.manager;
    let manager = quote_spanned!(manager.span()=> ::distlock::__private::manager(&(#manager)));
    // A `return` of the declared type lets the async block's output (and the `?`s in it)
    // be inferred; `impl Trait` cannot be named in a `let`, so it gets no hint.
    let hint = (!contains_impl_trait(return_type)).then(|| {
        quote! {
            #[allow(unreachable_code, clippy::diverging_sub_expression, clippy::empty_loop, clippy::let_unit_value)]
            if false {
                let __distlock_return: #return_type = loop {};
                return __distlock_return;
            }
        }
    });
    let ItemFn { attrs, vis, sig, block } = &function;
    let stmts = &block.stmts;
    let block = quote! {
        move || async move {
            #hint
            #(#stmts)*
        }
    };
    let locked = match args.mode {
        None => quote! {
            ::distlock::LockManager::with_lock_opts(&__distlock_manager, &__distlock_key, #ttl, &__distlock_options, #block)
        },
        Some(mode) => {
            let member = match mode {
                Mode::Read => quote!(::distlock::GroupMember::shared),
                Mode::Write => quote!(::distlock::GroupMember::exclusive),
            };
            quote! {
                async {
                    let __distlock_group = ::distlock::LockGroup::single(#member(&__distlock_key)?)?;
                    ::distlock::LockManager::with_lock_group_opts(
                        &__distlock_manager,
                        &__distlock_group,
                        #ttl,
                        &__distlock_options,
                        #block,
                    )
                    .await
                }
            }
        }
    };
    let locked = if args.reentrant { quote!(::distlock::reentrant_scope(#locked)) } else { locked };
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            let __distlock_manager: ::distlock::LockManager = #manager;
            let __distlock_key: ::std::string::String = #key;
            let __distlock_options: ::distlock::LockOptions = #options;
            #locked.await
        }
    })
}

fn duration_tokens(arg: &DurationArg) -> TokenStream {
    let secs = arg.value.as_secs();
    let nanos = arg.value.subsec_nanos();
    quote_spanned!(arg.lit.span()=> ::distlock::__private::Duration::new(#secs, #nanos))
}

/// Every name bound by the parameters' patterns: `order_id: u64` gives `order_id`,
/// axum's `Path(id): Path<u64>` gives `id`. `self` is not a parameter name.
fn parameter_names<'a>(inputs: impl Iterator<Item = &'a FnArg>) -> Vec<Ident> {
    let mut names = Vec::new();
    for input in inputs {
        if let FnArg::Typed(typed) = input {
            bindings(&typed.pat, &mut names);
        }
    }
    names
}

fn bindings(pat: &Pat, names: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(ident) => {
            names.push(ident.ident.clone());
            if let Some((_, sub)) = &ident.subpat {
                bindings(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|pat| bindings(pat, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|pat| bindings(pat, names)),
        Pat::Struct(s) => s.fields.iter().for_each(|field| bindings(&field.pat, names)),
        Pat::Reference(reference) => bindings(&reference.pat, names),
        Pat::Paren(paren) => bindings(&paren.pat, names),
        Pat::Slice(slice) => slice.elems.iter().for_each(|pat| bindings(pat, names)),
        Pat::Type(typed) => bindings(&typed.pat, names),
        _ => {}
    }
}

fn ident_text(ident: &Ident) -> String {
    let text = ident.to_string();
    text.strip_prefix("r#").map(str::to_owned).unwrap_or(text)
}

fn strip_parens(ty: &Type) -> &Type {
    match ty {
        Type::Paren(paren) => strip_parens(&paren.elem),
        Type::Group(group) => strip_parens(&group.elem),
        _ => ty,
    }
}

fn contains_impl_trait(ty: &Type) -> bool {
    ty.to_token_stream().to_string().split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == "impl")
}
